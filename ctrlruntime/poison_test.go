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
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// strictSupervision is a supervision spec that makes any restart, and an
// escalation, come fast: probes every 20ms, one unhealthy probe restarts,
// the second restart within the hour escalates.
func strictSupervision() cm.SupervisionSpec {
	return cm.SupervisionSpec{
		InitialBackoff: metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
		MaxRestarts:    1, RestartWindow: metav1.Duration{Duration: time.Hour},
		HealthInterval:     metav1.Duration{Duration: 20 * time.Millisecond},
		UnhealthyThreshold: 1,
	}
}

// childEvents keeps the events of the manager about one child.
type childEvents struct {
	mu   sync.Mutex
	seen map[cm.EventType]int
	any  []cm.Event
}

func watchChild(mgr *ctrlruntime.Manager, child string) *childEvents {
	ce := &childEvents{seen: map[cm.EventType]int{}}
	mgr.ControllerManager().Subscribe(func(e cm.Event) {
		if e.Child != child && e.Type != cm.Escalated {
			return
		}
		ce.mu.Lock()
		ce.seen[e.Type]++
		ce.any = append(ce.any, e)
		ce.mu.Unlock()
	})
	return ce
}

func (ce *childEvents) count(t cm.EventType) int {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return ce.seen[t]
}

// all returns the events so far.
func (ce *childEvents) all() []cm.Event {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	return append([]cm.Event(nil), ce.any...)
}

func (ce *childEvents) first(t cm.EventType) (cm.Event, bool) {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	for _, e := range ce.any {
		if e.Type == t {
			return e, true
		}
	}
	return cm.Event{}, false
}

// A poison object, one that makes every reconcile of its key panic, and
// another whose every reconcile fails, are what controller-runtime retries
// with the rate limiter's backoff, for ever, while the controller goes on
// reconciling its other keys and the manager runs on. Under a supervision
// spec whose first restart would already be the last, the reconciler must
// be neither failed, nor unhealthy, nor restarted, and the manager must
// not escalate; the panics stay visible: controller-runtime's counter and
// its "Observed a panic" line with the stack.
func TestEnvPoisonObjectIsRetriedNotRestarted(t *testing.T) {
	cfg := testenv.Config(t)
	logs := &logLines{}
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logs.logger(),
	}, strictSupervision())
	require.NoError(t, err)
	ns := namespace(t, mgr.GetClient())
	name := "poison-" + rand.String(6)
	var panics, failures atomic.Int32
	r := &recorder{behave: func(_ context.Context, req reconcile.Request) error {
		switch req.Name {
		case "poison":
			panics.Add(1)
			panic("cannot handle " + req.Name)
		case "failing":
			failures.Add(1)
			return errors.New("cannot handle " + req.Name)
		}
		return nil
	}}
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(name).
		For(&corev1.ConfigMap{}, builder.WithPredicates(inNS(ns))).
		// Retries every few milliseconds: many failures, quickly.
		WithOptions(controller.Options{RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, 5*time.Millisecond)}).
		Complete(r))
	steady := &recorder{}
	steadyName := "steady-" + rand.String(6)
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(steadyName).
		For(&corev1.Secret{}, builder.WithPredicates(inNS(ns))).Complete(steady))
	events := watchChild(mgr, name)
	var startErr error
	stopped := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(stopped); startErr = mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(time.Minute):
			t.Error("Start did not return within a minute of its context's end")
		}
	})

	cl := mgr.GetClient()
	for _, n := range []string{"poison", "failing", "good-1"} {
		require.NoError(t, cl.Create(context.Background(), configMap(ns, n)))
	}
	// Past any threshold, and over many health probes.
	deadline := time.Now().Add(time.Minute)
	for panics.Load() < 200 || failures.Load() < 200 {
		select {
		case <-stopped:
			t.Fatalf("the manager stopped after %d panics and %d failures of one key each: %v (events %v)",
				panics.Load(), failures.Load(), startErr, events.all())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d panics and %d failures within a minute", panics.Load(), failures.Load())
		}
	}
	assert.Zero(t, events.count(cm.ChildFailed), "a failed child: %v", events.all())
	assert.Zero(t, events.count(cm.ChildUnhealthy), "an unhealthy child: %v", events.all())
	assert.Zero(t, events.count(cm.ChildRestarted), "a restarted child: %v", events.all())
	assert.Zero(t, events.count(cm.Escalated), "an escalation: %v", events.all())

	// The controller's other keys, and the other controller, go on.
	require.NoError(t, cl.Create(context.Background(), configMap(ns, "good-2")))
	require.NoError(t, cl.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}))
	require.Eventually(t, func() bool { return r.saw("good-2") && steady.saw("s") }, 30*time.Second, 5*time.Millisecond)
	select {
	case <-stopped:
		t.Fatalf("the manager stopped: %v", startErr)
	default:
	}

	assert.GreaterOrEqual(t, gathered(t, ctrlmetrics.Registry, "controller_runtime_reconcile_panics_total", "controller", name), 200.0)
	assert.NotEmpty(t, logs.with(`"msg"="Observed a panic"`, `"controller"="`+name+`"`, `"stacktrace"=`),
		"controller-runtime's line, with the stack")
	// A recovered panic fails no child: the manager's own panic counter
	// does not see it (only a failure carries a panic to it), and its
	// health message does, healthy, naming the last one.
	assert.Zero(t, gathered(t, mgr.ControllerManager().Gatherer(), "controllermanager_child_panics_total", "child", name))
	var health cm.HealthStatus
	for _, h := range mgr.ControllerManager().GetHealth() {
		if h.Name == name {
			health = h
		}
	}
	assert.True(t, health.Healthy, "%+v", health)
	assert.Contains(t, health.Message, "; the last panic ")
	assert.Contains(t, health.Message, "reconciling "+ns+"/poison: cannot handle poison")
}

// RecoverPanic false is honoured: under controller-runtime the panic would
// end the process; here it fails the reconciler at its first panic, and the
// supervisor restarts it alone. manager.Options.Controller.RecoverPanic is
// the default of every reconciler, and WithOptions overrides it.
func TestEnvRecoverPanicFalseFailsTheReconciler(t *testing.T) {
	cfg := testenv.Config(t)
	spec := strictSupervision()
	spec.MaxRestarts = 1000
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{RecoverPanic: ptr.To(false)},
	}, spec)
	require.NoError(t, err)
	ns := namespace(t, mgr.GetClient())
	panicky := func(_ context.Context, req reconcile.Request) error {
		if req.Name == "poison" {
			panic("cannot handle " + req.Name)
		}
		return nil
	}
	strict, lenient := "strict-"+rand.String(6), "lenient-"+rand.String(6)
	strictR, lenientR := &recorder{behave: panicky}, &recorder{behave: panicky}
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(strict).
		For(&corev1.ConfigMap{}, builder.WithPredicates(inNS(ns))).Complete(strictR))
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(lenient).
		For(&corev1.ConfigMap{}, builder.WithPredicates(inNS(ns))).
		WithOptions(controller.Options{RecoverPanic: ptr.To(true),
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, 5*time.Millisecond)}).
		Complete(lenientR))
	strictEvents, lenientEvents := watchChild(mgr, strict), watchChild(mgr, lenient)
	startManager(t, mgr)

	require.NoError(t, mgr.GetClient().Create(context.Background(), configMap(ns, "poison")))
	require.Eventually(t, func() bool { return strictEvents.count(cm.ChildRestarted) > 0 }, 30*time.Second, 5*time.Millisecond,
		"the reconciler with RecoverPanic false was not restarted")
	failed, ok := strictEvents.first(cm.ChildFailed)
	require.True(t, ok)
	var perr *ctrlruntime.ReconcilePanicError
	require.ErrorAs(t, failed.Err, &perr)
	assert.Equal(t, 1, perr.Panics, "the first panic fails it")
	assert.NotEmpty(t, perr.Stack)

	require.Eventually(t, func() bool { return lenientR.count("poison") >= 20 }, 30*time.Second, 5*time.Millisecond)
	assert.Zero(t, lenientEvents.count(cm.ChildFailed)+lenientEvents.count(cm.ChildRestarted),
		"RecoverPanic true in WithOptions overrides the manager's false: %v", lenientEvents.all())
}
