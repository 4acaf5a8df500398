package ctrlruntime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// runOrder records the order in which its controllers' Run is called: the
// tree calls Run, and AddChild waits for it, so the order is the order
// they were added to the tree.
type runOrder struct {
	mu    sync.Mutex
	names []string
}

func (o *runOrder) ran() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.names...)
}

// orderedController is a controllermanager.Controller that records its Run
// in order; everywhere makes its NeedLeaderElection false.
type orderedController struct {
	name       string
	order      *runOrder
	everywhere bool
}

func (c *orderedController) Name() string { return c.name }
func (c *orderedController) Run(context.Context) error {
	c.order.mu.Lock()
	c.order.names = append(c.order.names, c.name)
	c.order.mu.Unlock()
	return nil
}
func (c *orderedController) Shutdown(context.Context) {}
func (c *orderedController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}
func (c *orderedController) NeedLeaderElection() bool { return !c.everywhere }

// Start makes it a manager.Runnable for Add, which hosts it as the
// controllermanager.Controller it is: never called.
func (c *orderedController) Start(context.Context) error { panic("hosted as a Controller") }

// gateController's Run returns once release is closed: the tree stays
// Starting until then.
type gateController struct {
	release chan struct{}
}

func (g *gateController) Name() string { return "gate" }
func (g *gateController) Run(ctx context.Context) error {
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (g *gateController) Shutdown(context.Context)    {}
func (g *gateController) Start(context.Context) error { panic("hosted as a Controller") }
func (g *gateController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "gate", Healthy: true}
}

func phaseOf(t *testing.T, mgr *ctrlruntime.Manager) cm.Phase {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := mgr.ControllerManager().Status(ctx)
	require.NoError(t, err)
	return st.Phase
}

func nopReconciler() reconcile.Reconciler {
	return reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
}

// On a standby, Add and Complete after Start succeed, as under
// controller-runtime (JobSet and Kueue set their controllers up after
// Start, once cert-controller's certificates are ready, and exit on an
// error: their standbys crash-looped); what they add runs once this
// replica is elected, in the order added, a runnable that needs no
// election included.
func TestEnvAddAfterStartOnStandbyRunsOnceElected(t *testing.T) {
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	id := heldLease(t, direct)
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics:        metricsserver.Options{BindAddress: "0"},
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default",
		LeaseDuration: ptr.To(15 * time.Second), RenewDeadline: ptr.To(10 * time.Second), RetryPeriod: ptr.To(200 * time.Millisecond),
	})
	require.NoError(t, err)
	first := &flagRunnable{}
	require.NoError(t, mgr.Add(first))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()
	require.Eventually(t, first.started.Load, 30*time.Second, 5*time.Millisecond)

	order := &runOrder{}
	reconciled := make(chan struct{}, 1)
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("late-"+rand.String(4)).For(&coordinationv1.Lease{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			select {
			case reconciled <- struct{}{}:
			default:
			}
			return reconcile.Result{}, nil
		})), "Complete after Start on a standby")
	require.NoError(t, mgr.Add(&orderedController{name: "late-a", order: order, everywhere: true}), "Add after Start on a standby")
	require.NoError(t, mgr.Add(&orderedController{name: "late-b", order: order}))
	require.NoError(t, mgr.Add(&orderedController{name: "late-c", order: order, everywhere: true}))
	assert.Empty(t, order.ran(), "ran on a standby")
	assert.NotEqual(t, cm.PhaseRunning, phaseOf(t, mgr), "a standby")

	// The other replica goes, releasing the Lease as client-go's elector
	// does: this one is elected.
	var held coordinationv1.Lease
	require.NoError(t, direct.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: id}, &held))
	now := metav1.NewMicroTime(time.Now())
	held.Spec.HolderIdentity, held.Spec.LeaseDurationSeconds, held.Spec.RenewTime = ptr.To(""), ptr.To[int32](1), &now
	require.NoError(t, direct.Update(context.Background(), &held))
	require.Eventually(t, func() bool { return len(order.ran()) == 3 }, 60*time.Second, 5*time.Millisecond, "phase %s, ran %v", phaseOf(t, mgr), order.ran())
	assert.Equal(t, []string{"late-a", "late-b", "late-c"}, order.ran(), "added in the order of the Adds")
	select {
	case <-reconciled:
	case err := <-done:
		t.Fatalf("Start returned before the late controller reconciled: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the controller completed after Start did not reconcile once elected")
	}
	// Once running, Add goes to the tree at once, and returns once started.
	require.NoError(t, mgr.Add(&orderedController{name: "late-d", order: order}))
	assert.Equal(t, []string{"late-a", "late-b", "late-c", "late-d"}, order.ran())
}

// On the leader, Add and Complete right after Elected is closed, while
// the tree is still starting its controllers, succeed; what they add runs
// once the tree runs, in order.
func TestEnvAddWhileLeaderStartsRunsOnceRunning(t *testing.T) {
	cfg := testenv.Config(t)
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	gate := &gateController{release: make(chan struct{})}
	require.NoError(t, mgr.Add(gate))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()
	<-mgr.Elected()
	require.Equal(t, cm.PhaseStarting, phaseOf(t, mgr), "the gate keeps the tree Starting")

	order := &runOrder{}
	require.NoError(t, mgr.Add(&orderedController{name: "late-a", order: order}), "Add right after Elected")
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("late-"+rand.String(4)).For(&coordinationv1.Lease{}).
		Complete(nopReconciler()), "Complete right after Elected")
	require.NoError(t, mgr.Add(&orderedController{name: "late-b", order: order, everywhere: true}))
	assert.Empty(t, order.ran(), "ran before the tree runs")

	close(gate.release)
	require.Eventually(t, func() bool { return len(order.ran()) == 2 }, 30*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"late-a", "late-b"}, order.ran())
}

// A standby that stops before it is elected drops what was added after
// Start, never started (TestMain's goleak: nothing left running), and Start
// returns nil; an Add after Start has returned fails.
func TestEnvAddAfterStartDroppedWhenStoppedBeforeElected(t *testing.T) {
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	id := heldLease(t, direct)
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics:        metricsserver.Options{BindAddress: "0"},
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default",
	})
	require.NoError(t, err)
	first := &flagRunnable{}
	require.NoError(t, mgr.Add(first))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	require.Eventually(t, first.started.Load, 30*time.Second, 5*time.Millisecond)

	order := &runOrder{}
	require.NoError(t, mgr.Add(&orderedController{name: "late-a", order: order, everywhere: true}))
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("late-"+rand.String(4)).For(&coordinationv1.Lease{}).
		Complete(nopReconciler()))
	late := &flagRunnable{needLeader: true}
	require.NoError(t, mgr.Add(late))
	cancel()
	require.NoError(t, <-done)
	assert.Empty(t, order.ran(), "ran although never elected")
	assert.False(t, late.started.Load(), "ran although never elected")
	assert.Error(t, mgr.Add(&flagRunnable{}), "Add after Start returned")
}
