package ctrlruntime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// firstReconcile records when its reconciler first ran.
type firstReconcile struct {
	once sync.Once
	at   chan time.Time // receives the first reconcile's time
}

func newFirstReconcile() *firstReconcile { return &firstReconcile{at: make(chan time.Time, 1)} }

func (f *firstReconcile) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	now := time.Now()
	f.once.Do(func() { f.at <- now })
	return reconcile.Result{}, nil
}

// A failover, measured the same way for a ctrlruntime.Manager and for
// controller-runtime's own manager, each pair sharing one Lease: the
// leader stops (releasing the Lease), the standby is elected, and the test
// records the time from the standby's election to its first reconcile and
// the LISTs of the watched kind the standby sends after its election.
// ctrlruntime's standby is warm: no LIST, and no poll period to wait out.
func TestEnvFigureFailover(t *testing.T) {
	cfg := testenv.Config(t)
	setup, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	ns := namespace(t, setup)
	require.NoError(t, setup.Create(context.Background(), configMap(ns, "one")))

	timing := func() (lease, renew, retry *time.Duration) {
		return durationPtr(2 * time.Second), durationPtr(1500 * time.Millisecond), durationPtr(100 * time.Millisecond)
	}
	options := func(id string) manager.Options {
		lease, renew, retry := timing()
		return manager.Options{
			Metrics: metricsserver.Options{BindAddress: "0"}, LeaderElection: true,
			LeaderElectionID: id, LeaderElectionNamespace: ns, LeaderElectionReleaseOnCancel: true,
			LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
		}
	}
	onlyNS := predicateFunc(func(o client.Object) bool { return o.GetNamespace() == ns })

	type replica struct {
		start   func(ctx context.Context) error
		elected func() time.Time // blocks until elected
		first   *firstReconcile
		lists   *testenv.ListCounter
	}
	// ours builds a ctrlruntime.Manager replica.
	ours := func(id string) replica {
		lists := &testenv.ListCounter{}
		config := rest.CopyConfig(cfg)
		lists.Wrap(config)
		electedAt := make(chan time.Time, 1)
		mgr, err := ctrlruntime.NewManager(config, options(id))
		require.NoError(t, err)
		mgr.ControllerManager().Subscribe(func(e cm.Event) {
			if e.Type == cm.LeaderElected {
				select {
				case electedAt <- e.Time:
				default:
				}
			}
		})
		first := newFirstReconcile()
		require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("failover").
			For(&corev1.ConfigMap{}, ctrlruntime.WithPredicates(onlyNS)).Complete(first))
		return replica{start: mgr.Start, elected: func() time.Time { return <-electedAt }, first: first, lists: lists}
	}
	// theirs builds a controller-runtime manager replica.
	theirs := func(id string) replica {
		lists := &testenv.ListCounter{}
		config := rest.CopyConfig(cfg)
		lists.Wrap(config)
		mgr, err := ctrl.NewManager(config, options(id))
		require.NoError(t, err)
		first := newFirstReconcile()
		require.NoError(t, ctrl.NewControllerManagedBy(mgr).Named("failover-"+rand.String(6)).
			WithOptions(controllerOptions()).
			For(&corev1.ConfigMap{}, builder.WithPredicates(onlyNS)).Complete(first))
		return replica{start: mgr.Start, elected: func() time.Time { <-mgr.Elected(); return time.Now() }, first: first, lists: lists}
	}

	for _, impl := range []struct {
		name  string
		build func(id string) replica
	}{{"ctrlruntime.Manager", ours}, {"controller-runtime", theirs}} {
		t.Run(impl.name, func(t *testing.T) {
			id := "failover-" + rand.String(6)
			leader, standby := impl.build(id), impl.build(id)
			run := func(r replica) (stop func()) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- r.start(ctx) }()
				return func() {
					cancel()
					select {
					case err := <-done:
						assert.NoError(t, err)
					case <-time.After(time.Minute):
						t.Error("Start did not return within a minute")
					}
				}
			}
			stopLeader := run(leader)
			leader.elected()
			<-leader.first.at
			stopStandby := run(standby)
			defer stopStandby()
			// The standby is started and waiting; give its cache the time
			// a standby has in production to warm up before the failover.
			require.Eventually(t, func() bool { return standby.lists.Lists("configmaps") > 0 || impl.name == "controller-runtime" },
				30*time.Second, 5*time.Millisecond)

			stopLeader()
			electedAt := standby.elected()
			listsAtElection := standby.lists.Lists("configmaps")
			var firstAt time.Time
			select {
			case firstAt = <-standby.first.at:
			case <-time.After(30 * time.Second):
				t.Fatal("the standby did not reconcile within 30s of its election")
			}
			lists := standby.lists.Lists("configmaps") - listsAtElection
			t.Logf("figure: %s: election to first reconcile %v, LISTs of configmaps after the election %d",
				impl.name, firstAt.Sub(electedAt).Round(100*time.Microsecond), lists)
			if impl.name == "ctrlruntime.Manager" {
				assert.Zero(t, lists, "a warm standby lists nothing after its election")
			}
		})
	}
}

func durationPtr(d time.Duration) *time.Duration { return &d }
