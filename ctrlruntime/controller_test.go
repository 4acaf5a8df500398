package ctrlruntime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
)

// fakeContext is a Context over controller-runtime's fake informers (whose
// events the test sends) and fake client.
func fakeContext(t testing.TB) (*ctrlruntime.Context, *informertest.FakeInformers) {
	t.Helper()
	informers := &informertest.FakeInformers{Scheme: scheme.Scheme}
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	ctx, err := ctrlruntime.NewContextWith(informers, cl, scheme.Scheme, nil)
	require.NoError(t, err)
	// The fake's informer map is not safe for concurrent writes: create
	// the informers of the kinds the tests watch before any source runs.
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		_, err := informers.FakeInformerFor(context.Background(), obj)
		require.NoError(t, err)
	}
	return ctx, informers
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// recorder is a reconciler that records the requests it sees and does what
// its behave says for each.
type recorder struct {
	mu     sync.Mutex
	seen   []reconcile.Request
	behave func(ctx context.Context, req reconcile.Request) error
	// What some builder tests keep beside it.
	logged *atomic.Int32
	events chan event.GenericEvent
}

func (r *recorder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req)
	behave := r.behave
	r.mu.Unlock()
	if behave != nil {
		return reconcile.Result{}, behave(ctx, req)
	}
	return reconcile.Result{}, nil
}

func (r *recorder) saw(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range r.seen {
		if req.Name == name {
			return true
		}
	}
	return false
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, req := range r.seen {
		if req.Name == name {
			n++
		}
	}
	return n
}

// unregistered is a kind no scheme knows.
type unregistered struct{ corev1.ConfigMap }

// The builder refuses what controller-runtime's refuses, with
// controller-runtime's errors (its builder tests' cases), plus its own.
func TestBuilderRejectsBadDeclarations(t *testing.T) {
	ctx, _ := fakeContext(t)
	r := &recorder{}
	tests := []struct {
		name  string
		build func() (*ctrlruntime.Controller, error)
		want  []string
	}{
		{"nil host", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(nil).Named("x").WatchesRawSource(nil).Build(r)
		}, []string{"host is nil", "WatchesRawSource: source is nil"}},
		{"For twice", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).For(&corev1.Pod{}).For(&corev1.Secret{}).Owns(&corev1.ConfigMap{}).Build(r)
		}, []string{"For(...) should only be called once, could not assign multiple objects for reconciliation"}},
		{"neither For nor Named", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).Watches(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}).Build(r)
		}, []string{"one of For() or Named() must be called"}},
		{"Owns without For", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).Named("x").Owns(&corev1.ConfigMap{}).Build(r)
		}, []string{"Owns() can only be used together with For()"}},
		{"nothing watched", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).Named("x").Build(r)
		}, []string{"there are no watches configured, controller will never get triggered. Use For(), Owns(), Watches() or WatchesRawSource() to set them up"}},
		{"no kind for the For type", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).For(&unregistered{}).Owns(&corev1.ConfigMap{}).Build(r)
		}, []string{"no kind is registered for the type"}},
		{"nil reconciler", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).For(&corev1.Pod{}).Build(nil)
		}, []string{"must provide a non-nil Reconciler"}},
		{"two reconcilers", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).For(&corev1.Pod{}).WithOptions(controller.Options{Reconciler: r}).Build(r)
		}, []string{"reconciler was set via WithOptions() and via Build() or Complete()"}},
		{"error rate past 1", func() (*ctrlruntime.Controller, error) {
			return ctrlruntime.NewControllerManagedBy(ctx).For(&corev1.Pod{}).WithSupervision(ctrlruntime.Options{ErrorRateThreshold: 2}).Build(r)
		}, []string{"ErrorRateThreshold 2 is past 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.build()
			require.Error(t, err)
			assert.Nil(t, c)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	c, err := ctrlruntime.NewControllerManagedBy(ctx).For(&corev1.ConfigMap{}).Build(r)
	require.NoError(t, err)
	assert.Equal(t, "configmap", c.Name(), "named after the For kind, as controller-runtime names it")
	c, err = ctrlruntime.NewControllerManagedBy(ctx).Named("no-for").Watches(&corev1.ConfigMap{}, &handler.EnqueueRequestForObject{}).Build(r)
	require.NoError(t, err, "a controller without For")
	assert.Equal(t, "no-for", c.Name())
}

// A reconciler's every incarnation is a fresh controller-runtime controller:
// Run, Shutdown, Run again reconciles again (controller-runtime alone
// refuses a second Start).
func TestControllerRunsAgainAfterShutdown(t *testing.T) {
	ctx, informers := fakeContext(t)
	r := &recorder{}
	c, err := ctrlruntime.NewControllerManagedBy(ctx).Named("again").For(&corev1.ConfigMap{}).Build(r)
	require.NoError(t, err)
	assert.Equal(t, "not started", c.GetHealth().Message)
	inf, err := informers.FakeInformerFor(context.Background(), &corev1.ConfigMap{})
	require.NoError(t, err)

	for i, name := range []string{"first", "second", "third"} {
		require.NoError(t, c.Run(context.Background()), "incarnation %d", i)
		h := c.GetHealth()
		assert.True(t, h.Healthy, h.Message)
		inf.Add(configMap("ns", name))
		require.Eventually(t, func() bool { return r.saw(name) }, 10*time.Second, 5*time.Millisecond)
		assert.Equal(t, 1, c.Stats().Handlers, "one handler per incarnation")
		c.Shutdown(context.Background())
		assert.Equal(t, 0, c.Stats().Handlers, "Shutdown removes the incarnation's handlers")
		assert.False(t, c.GetHealth().Healthy)
	}
	assert.Equal(t, 3, c.Stats().Incarnations)
}

// Run waits for the sources to sync, and gives up when its context ends.
func TestControllerRunWaitsForSync(t *testing.T) {
	ctx, informers := fakeContext(t)
	informers.Synced = new(bool) // never synced
	c, err := ctrlruntime.NewControllerManagedBy(ctx).Named("unsynced").For(&corev1.ConfigMap{}).Build(&recorder{})
	require.NoError(t, err)
	runCtx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = c.Run(runCtx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sources did not sync")
	c.Shutdown(context.Background())
}

// Shutdown waits for a reconcile in flight, bounded by its context.
func TestControllerShutdownWaitsForInFlight(t *testing.T) {
	ctx, informers := fakeContext(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	r := &recorder{behave: func(context.Context, reconcile.Request) error {
		close(entered)
		<-release
		returned.Store(true)
		return nil
	}}
	c, err := ctrlruntime.NewControllerManagedBy(ctx).Named("inflight").For(&corev1.ConfigMap{}).Build(r)
	require.NoError(t, err)
	require.NoError(t, c.Run(context.Background()))
	inf, _ := informers.FakeInformerFor(context.Background(), &corev1.ConfigMap{})
	inf.Add(configMap("ns", "slow"))
	<-entered

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c.Shutdown(short) // gives up: the reconcile still runs
	assert.False(t, returned.Load())

	done := make(chan struct{})
	go func() { c.Shutdown(context.Background()); close(done) }()
	close(release)
	<-done
	assert.True(t, returned.Load(), "Shutdown returned only after the reconcile did")
}

// hostedManager runs controllers under a real manager without election.
func hostedManager(t *testing.T, ctx cm.Context, children ...cm.Runnable) (*cm.ControllerManager, *events) {
	t.Helper()
	m, err := cm.NewControllerManager(ctx, cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{
			InitialBackoff: metav1.Duration{Duration: time.Millisecond},
			MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
			MaxRestarts:    100,
		},
	}, "test")
	require.NoError(t, err)
	ev := &events{}
	m.Subscribe(ev.add)
	m.Add(children...)
	require.NoError(t, m.Start(context.Background(), 30*time.Second))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.ShutdownAndWait(sctx)
	})
	return m, ev
}

type events struct {
	mu  sync.Mutex
	all []cm.Event
}

func (e *events) add(ev cm.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
}

// of returns the events of type typ for child.
func (e *events) of(child string, typ cm.EventType) []cm.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []cm.Event
	for _, ev := range e.all {
		if ev.Child == child && ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// A reconcile that panics is retried like an error; the PanicThreshold-th
// panic of an incarnation is reported, and the supervisor restarts that
// reconciler alone.
func TestPanicsPastThresholdRestartTheReconcilerAlone(t *testing.T) {
	ctx, informers := fakeContext(t)
	bad := &recorder{behave: func(_ context.Context, req reconcile.Request) error {
		if req.Name == "poison" {
			panic("poisoned")
		}
		return nil
	}}
	good := &recorder{}
	badC, err := ctrlruntime.NewControllerManagedBy(ctx).Named("bad").For(&corev1.ConfigMap{}).
		WithSupervision(ctrlruntime.Options{PanicThreshold: 2}).Build(bad)
	require.NoError(t, err)
	goodC, err := ctrlruntime.NewControllerManagedBy(ctx).Named("good").For(&corev1.Secret{}).Build(good)
	require.NoError(t, err)
	_, ev := hostedManager(t, ctx, badC, goodC)

	cms, _ := informers.FakeInformerFor(context.Background(), &corev1.ConfigMap{})
	secrets, _ := informers.FakeInformerFor(context.Background(), &corev1.Secret{})
	cms.Add(configMap("ns", "poison"))
	require.Eventually(t, func() bool { return len(ev.of("bad", cm.ChildFailed)) > 0 }, 10*time.Second, 5*time.Millisecond)
	failed := ev.of("bad", cm.ChildFailed)[0]
	var perr *ctrlruntime.ReconcilePanicError
	require.ErrorAs(t, failed.Err, &perr)
	assert.Equal(t, "bad", perr.Controller)
	assert.Equal(t, "ns/poison", perr.Request)
	assert.Equal(t, 2, perr.Panics)
	assert.GreaterOrEqual(t, bad.count("poison"), 2, "the first panic was retried, the second reported")
	require.Eventually(t, func() bool { return len(ev.of("bad", cm.ChildRestarted)) > 0 }, 10*time.Second, 5*time.Millisecond)

	secrets.Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "still"}})
	require.Eventually(t, func() bool { return good.saw("still") }, 10*time.Second, 5*time.Millisecond)
	assert.Empty(t, ev.of("good", cm.ChildFailed), "the other reconciler was not touched")
	assert.Empty(t, ev.of("good", cm.ChildRestarted))
}

func TestWebhookServesAnAdmissionHandler(t *testing.T) {
	_, err := ctrlruntime.NewWebhook("", "nopath", nil)
	require.Error(t, err)
	for _, w := range []string{"name is empty", `path "nopath"`, "handler is nil"} {
		assert.Contains(t, err.Error(), w)
	}
}

func TestRunnableRejectsBadArguments(t *testing.T) {
	_, err := ctrlruntime.NewRunnable("", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "name is empty")
	assert.Contains(t, err.Error(), "build is nil")
}

var errBoom = errors.New("boom")

// predicateFunc is a predicate on the object of every event.
type predicateFunc func(client.Object) bool

func (f predicateFunc) Create(e event.CreateEvent) bool   { return f(e.Object) }
func (f predicateFunc) Update(e event.UpdateEvent) bool   { return f(e.ObjectNew) }
func (f predicateFunc) Delete(e event.DeleteEvent) bool   { return f(e.Object) }
func (f predicateFunc) Generic(e event.GenericEvent) bool { return f(e.Object) }

func newBenchController(ctx *ctrlruntime.Context) (*ctrlruntime.Controller, error) {
	return ctrlruntime.NewControllerManagedBy(ctx).Named("bench").For(&corev1.ConfigMap{}).Owns(&corev1.ConfigMap{}).Build(&recorder{})
}

// gatedSource is a source that syncs when its gate is closed.
type gatedSource struct{ gate chan struct{} }

func (gatedSource) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

func (g gatedSource) WaitForSync(ctx context.Context) error {
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GetHealth is unhealthy while the sources have not synced.
func TestHealthUnhealthyUntilSourcesSync(t *testing.T) {
	ctx, _ := fakeContext(t)
	gate := make(chan struct{})
	c, err := ctrlruntime.NewControllerManagedBy(ctx).Named("gated").
		WatchesSource(func(cache.Cache) source.TypedSource[reconcile.Request] { return gatedSource{gate: gate} }).
		Build(&recorder{})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	require.Eventually(t, func() bool {
		h := c.GetHealth()
		return !h.Healthy && h.Message == "caches not synced: waiting for the sources to sync"
	}, 10*time.Second, time.Millisecond)
	close(gate)
	require.NoError(t, <-ran)
	h := c.GetHealth()
	assert.True(t, h.Healthy, h.Message)
	assert.Equal(t, "0 reconciles, 0 failed, 0 panicked, 0 running", h.Message)
	c.Shutdown(context.Background())
}
