package ctrlruntime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// reconcileResults is controller_runtime_reconcile_total{controller, result}
// on metrics.Registry.
func reconcileResults(t *testing.T, controller, result string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == controller && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A reconcile deaf to its context outlives its incarnation's Shutdown
// (ShutdownTimeout 1s), and RestartChild starts the next incarnation. That
// one must not reconcile the same key while the old reconcile runs:
// controller-runtime never reconciles one key twice at once, and
// reconcilers rely on it. The new incarnation requeues the key
// (controller_runtime_reconcile_total{result="requeue_after"}) until the
// old reconcile has returned, then reconciles it.
func TestEnvRestartNeverReconcilesAKeyTwiceAtOnce(t *testing.T) {
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	ns := namespace(t, direct)
	require.NoError(t, direct.Create(context.Background(), configMap(ns, "k")))

	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: time.Second}})
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		overlaps atomic.Int32
		calls    atomic.Int32
		entered  = make(chan struct{})
		release  = make(chan struct{})
	)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	name := "busy-" + rand.String(6)
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(name).For(&corev1.ConfigMap{}, inNamespace(ns)).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			mu.Lock()
			inFlight["k"]++
			if inFlight["k"] > 1 {
				overlaps.Add(1)
			}
			mu.Unlock()
			defer func() { mu.Lock(); inFlight["k"]--; mu.Unlock() }()
			if calls.Add(1) == 1 {
				close(entered)
				<-release // deaf to its context
			}
			return reconcile.Result{}, nil
		})))
	startManager(t, mgr)
	t.Cleanup(releaseOnce) // before the manager stops

	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile of the key within 30s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.ControllerManager().RestartChild(ctx, name))

	// The new incarnation gets to the key: it either reconciles it beside
	// the old reconcile, or requeues it.
	require.Eventually(t, func() bool {
		return overlaps.Load() > 0 || reconcileResults(t, name, "requeue_after") > 0
	}, 10*time.Second, 5*time.Millisecond, "the restarted controller never got to the key")
	require.Zero(t, overlaps.Load(), "the key was reconciled by two incarnations at once")
	require.EqualValues(t, 1, calls.Load(), "the key was reconciled again before the old reconcile returned")

	releaseOnce()
	require.Eventually(t, func() bool { return calls.Load() >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the key is reconciled once the old reconcile has returned")
	require.Zero(t, overlaps.Load())
}
