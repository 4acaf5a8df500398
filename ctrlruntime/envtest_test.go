package ctrlruntime_test

// Against a real kube-apiserver and etcd (internal/testenv): skipped when
// KUBEBUILDER_ASSETS is empty.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/health"
)

// realContext is a started Context on the shared API server, stopped at
// cleanup, and a namespace of the test's own.
func realContext(t *testing.T, config *rest.Config, opts ctrlruntime.ContextOptions) *ctrlruntime.Context {
	t.Helper()
	ctx, err := ctrlruntime.NewContext(config, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx.Stop(sctx)
	})
	return ctx
}

func namespace(t *testing.T, cl client.Client) string {
	t.Helper()
	name := "t-" + rand.String(8)
	require.NoError(t, cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

func inNamespace(ns string) ctrlruntime.WatchOption {
	return ctrlruntime.WithPredicates(predicateFunc(func(o client.Object) bool { return o.GetNamespace() == ns }))
}

// A reconciler that panics on one object, with a PanicThreshold, is
// restarted alone, through the supervisor, while another reconciler of the same manager goes on
// reconciling; the restart time is logged.
func TestEnvPanickingReconcilerIsRestartedAlone(t *testing.T) {
	config := testenv.Config(t)
	registry := prometheus.NewRegistry()
	cctx := realContext(t, config, ctrlruntime.ContextOptions{Registerer: registry})
	cl := cctx.GetClient()
	ns := namespace(t, cl)

	poisoned := &recorder{behave: func(_ context.Context, req reconcile.Request) error {
		if req.Name == "poison" {
			panic("cannot handle " + req.Name)
		}
		return nil
	}}
	steady := &recorder{}
	poisonedC, err := ctrlruntime.NewControllerManagedBy(cctx).Named("poisoned").
		For(&corev1.ConfigMap{}, inNamespace(ns)).
		WithSupervision(ctrlruntime.Options{PanicThreshold: 3}).Build(poisoned)
	require.NoError(t, err)
	steadyC, err := ctrlruntime.NewControllerManagedBy(cctx).Named("steady").
		For(&corev1.Secret{}, inNamespace(ns)).Build(steady)
	require.NoError(t, err)
	m, err := cm.NewControllerManager(cctx, cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{
			InitialBackoff: metav1.Duration{Duration: time.Millisecond},
			MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
			MaxRestarts:    1000,
			RestartWindow:  metav1.Duration{Duration: time.Hour},
		},
	}, "env-panic", cm.WithRegisterer(registry))
	require.NoError(t, err)
	ev := &events{}
	m.Subscribe(ev.add)
	m.Add(poisonedC, steadyC)
	require.NoError(t, m.Start(context.Background(), time.Minute))
	defer shutdown(t, m)

	ctx := context.Background()
	require.NoError(t, cl.Create(ctx, configMap(ns, "poison")))
	require.Eventually(t, func() bool { return len(ev.of("poisoned", cm.ChildRestarted)) >= 2 }, time.Minute, 10*time.Millisecond,
		"the poisoned reconciler is restarted, again and again")
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
		require.Eventually(t, func() bool { return steady.saw(name) }, 30*time.Second, 10*time.Millisecond)
	}
	assert.Empty(t, ev.of("steady", cm.ChildFailed), "the steady reconciler never failed")
	assert.Empty(t, ev.of("steady", cm.ChildRestarted))

	// Restart time: from the failure to the restarted incarnation's sources
	// synced (Run returned), with 1ms of backoff.
	failed, restarted := ev.of("poisoned", cm.ChildFailed), ev.of("poisoned", cm.ChildRestarted)
	var took []time.Duration
	for i := 0; i < len(failed) && i < len(restarted); i++ {
		took = append(took, restarted[i].Time.Sub(failed[i].Time))
	}
	t.Logf("FIGURE reconciler restart (ChildFailed -> ChildRestarted, 1ms backoff, warm shared cache): %v", took)

	// controller-runtime's metrics are on the manager's registerer.
	families, err := registry.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				// controller-runtime's label is "controller" (the
				// workqueue's "name"), the manager's "child".
				if (l.GetName() == "controller" || l.GetName() == "name" || l.GetName() == "child") && (l.GetValue() == "steady" || l.GetValue() == "poisoned") {
					have[f.GetName()] = true
				}
			}
		}
	}
	for _, name := range []string{"controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total", "controller_runtime_reconcile_time_seconds", "workqueue_adds_total", "controllermanager_child_restarts_total"} {
		assert.True(t, have[name], "%s for the hosted reconcilers on the manager's registry", name)
	}
}

// A reconcile running past StuckAfter makes /healthz fail, naming it.
func TestEnvStuckReconcileShowsOnHealthz(t *testing.T) {
	config := testenv.Config(t)
	cctx := realContext(t, config, ctrlruntime.ContextOptions{})
	cl := cctx.GetClient()
	ns := namespace(t, cl)
	release := make(chan struct{})
	stuck := &recorder{behave: func(ctx context.Context, req reconcile.Request) error {
		if req.Name == "wedged" {
			<-release
		}
		return nil
	}}
	c, err := ctrlruntime.NewControllerManagedBy(cctx).Named("wedging").For(&corev1.ConfigMap{}, inNamespace(ns)).
		WithSupervision(ctrlruntime.Options{StuckAfter: 300 * time.Millisecond}).Build(stuck)
	require.NoError(t, err)
	m, err := cm.NewControllerManager(cctx, cm.ControllerManagerConfigSpec{}, "env-stuck")
	require.NoError(t, err)
	m.Add(c)
	require.NoError(t, m.Start(context.Background(), time.Minute))
	defer shutdown(t, m)
	defer close(release) // before the shutdown, which waits for the reconcile
	srv := httptest.NewServer(health.NewHandler(m))
	defer srv.Close()

	code, body := get(t, srv.URL+"/healthz?verbose")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, cl.Create(context.Background(), configMap(ns, "wedged")))
	require.Eventually(t, func() bool {
		code, body = get(t, srv.URL+"/healthz?verbose")
		return code == http.StatusInternalServerError
	}, 30*time.Second, 50*time.Millisecond)
	assert.Contains(t, body, "wedging")
	assert.Contains(t, body, "reconcile of "+ns+"/wedged stuck: running for")
	assert.Contains(t, body, "past the 300ms deadline")
}

// FIGURE: the memory of one shared cache for several reconcilers of a kind,
// against one cache each (what a manager per controller costs).
func TestEnvFigureSharedCacheMemory(t *testing.T) {
	config := testenv.Config(t)
	setup := realContext(t, config, ctrlruntime.ContextOptions{})
	ns := namespace(t, setup.GetClient())
	const objects, reconcilers = 1000, 5
	payload := strings.Repeat("x", 1024)
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	sem := make(chan struct{}, 16)
	for i := range objects {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmObj := configMap(ns, fmt.Sprintf("m%04d", i))
			cmObj.Data = map[string]string{"payload": payload}
			errs <- setup.GetClient().Create(context.Background(), cmObj)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	measure := func(caches int) uint64 {
		before := heap()
		var ctxs []*ctrlruntime.Context
		for range caches {
			c, err := ctrlruntime.NewContext(rest.CopyConfig(config), ctrlruntime.ContextOptions{})
			require.NoError(t, err)
			c.Warm(&corev1.ConfigMap{})
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			require.NoError(t, c.Start(sctx))
			cancel()
			ctxs = append(ctxs, c)
		}
		after := heap()
		for _, c := range ctxs {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c.Stop(sctx)
			cancel()
		}
		return after - min(before, after)
	}
	shared := measure(1)
	perController := measure(reconcilers)
	t.Logf("FIGURE cache memory, %d ConfigMaps of 1KiB (cluster-wide informer), %d reconcilers: shared cache %.1f MiB, one cache per reconciler %.1f MiB (%.1fx)",
		objects, reconcilers, mib(shared), mib(perController), float64(perController)/float64(max(shared, 1)))
	assert.Greater(t, perController, shared*2, "a cache per reconciler holds the objects once per reconciler")
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func shutdown(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.ShutdownAndWait(ctx)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}
