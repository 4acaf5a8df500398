package controllermanager_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// slowStopCtrl is a member's controller whose Run fails when fail is set,
// and whose Shutdown after the second failed Run waits for release (as a
// controller that drains a queue takes its time); inShutdown counts the
// Shutdowns under way.
type slowStopCtrl struct {
	deaf       bool // its held Shutdown ignores its context
	fail, hold atomic.Bool
	failed     atomic.Int32
	inShutdown atomic.Int32
	release    chan struct{}
}

func (c *slowStopCtrl) Run(context.Context) error {
	if c.fail.Load() {
		if c.failed.Add(1) == 2 {
			c.hold.Store(true)
		}
		return errors.New("cannot start")
	}
	return nil
}

func (c *slowStopCtrl) Shutdown(ctx context.Context) {
	c.inShutdown.Add(1)
	defer c.inShutdown.Add(-1)
	if c.hold.Load() {
		done := ctx.Done()
		if c.deaf {
			done = nil
		}
		select {
		case <-c.release:
		case <-done:
		}
	}
}

func (c *slowStopCtrl) Name() string { return "ctrl" }
func (c *slowStopCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

// A member whose group spends its restart budget is said Failed (its
// ClusterOffline) once its group has stopped: not while the failed run's
// Shutdown, which the group's stop waits for, still runs. docs/fleet.md:
// "A member whose group was stopped this way is Failed".
//
// Before, the ClusterOffline came with the group's ChildFailed, as its
// stop began (the state space's member-running, 2 in 571 sequences).
func TestFleetMemberSaidFailedOnceItsGroupHasStopped(t *testing.T) {
	clk, b, ctrl, fleet, mgr, log, early := slowStopFleet(t, false, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ctrl.fail.Store(true) // the restart asked for fails, and so does the one its budget allows
	require.Error(t, mgr.RestartChild(ctx, "fleet/b/ctrl"))
	failed := log.waitFor(t, clk, fleetPeriod, is(cm.ChildFailed, "fleet/b"))
	require.ErrorContains(t, failed.Err, "spent its restart budget")
	// The member's loop has woken for the failure and stepped: it has
	// probed twice since.
	probes := b.probes.Load()
	log.waitUntil(t, clk, fleetPeriod, func() bool { return b.probes.Load() >= probes+2 })
	require.Zero(t, log.count(is(cm.ClusterOffline, "fleet/b")), "said Failed while its group's stop waits for a Shutdown")
	st, _ := fleet.Cluster("b")
	require.NotEqual(t, cm.ClusterStateFailed, st.State)

	close(ctrl.release)
	off := log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/b"))
	require.ErrorContains(t, off.Err, "spent its restart budget")
	require.Zero(t, early.Load(), "ClusterOffline while a Shutdown of the member ran")
	st, _ = fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateFailed, st.State)
}

// The same, with the Shutdown that the group's stop waits for ignoring
// its context: the member is said Failed once the group has been
// Stopping for its ShutdownTimeout, while that Shutdown still runs (as
// a Shutdown that hangs in a restart fails the member at once), not
// never.
func TestFleetMemberSaidFailedWhenItsGroupsStopOverruns(t *testing.T) {
	clk, _, ctrl, fleet, mgr, log, _ := slowStopFleet(t, true, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctrl.fail.Store(true)
	require.Error(t, mgr.RestartChild(ctx, "fleet/b/ctrl"))
	failed := log.waitFor(t, clk, fleetPeriod, is(cm.ChildFailed, "fleet/b"))
	require.ErrorContains(t, failed.Err, "spent its restart budget")
	// The group's stop has called the Shutdown that will not return, on a
	// goroutine of its own: stepping the clock by an hour before that
	// goroutine ran (a loaded machine) said the member Failed, rightly,
	// with no Shutdown under way yet, and the check below failed.
	log.waitUntil(t, nil, 0, func() bool { return ctrl.inShutdown.Load() > 0 })
	// The group's ShutdownTimeout passes (the restarts before it stepped
	// the clock by a second, so no Shutdown of theirs overran an hour).
	off := log.waitFor(t, clk, time.Hour, is(cm.ClusterOffline, "fleet/b"))
	require.ErrorContains(t, off.Err, "spent its restart budget")
	require.Positive(t, ctrl.inShutdown.Load(), "the Shutdown still runs")
	st, _ := fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	cs, _ := fleetChild(t, mgr, "fleet/b")
	require.Equal(t, supervisor.StateStopping, cs.State)
	close(ctrl.release)
	log.waitFor(t, nil, 0, is(cm.ChildStopped, "fleet/b"))
}

// slowStopFleet runs a fleet of one member, b, Online, whose one
// controller is ctrl (a restart budget of 1, the group's ShutdownTimeout
// shutdown); early counts the ClusterOffline of b a subscriber saw while
// a Shutdown of ctrl ran.
func slowStopFleet(t *testing.T, deaf bool, shutdown time.Duration) (*clocktesting.FakeClock, *fakeMember, *slowStopCtrl, *cm.Fleet, *cm.ControllerManager, *eventLog, *atomic.Int32) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"b": b.config()})
	ctrl := &slowStopCtrl{deaf: deaf, release: make(chan struct{})}
	spec := fleetSpec()
	spec.Supervision = cm.SupervisionSpec{MaxRestarts: 1, RestartWindow: metav1.Duration{Duration: time.Hour},
		InitialBackoff: metav1.Duration{Duration: time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 2 * time.Millisecond},
		ShutdownTimeout: metav1.Duration{Duration: shutdown}}
	fleet := cm.NewFleet("fleet", prov, func(cm.Cluster) []cm.Runnable { return []cm.Runnable{ctrl} }, spec)
	mgr, log := fleetManager(t, clk, fleet)
	var once sync.Once
	t.Cleanup(func() { // registered after the manager's: it runs first
		once.Do(func() {
			select {
			case <-ctrl.release:
			default:
				close(ctrl.release)
			}
		})
	})
	// What a subscriber sees as the ClusterOffline comes: a Shutdown of
	// the member's controller still under way.
	early := new(atomic.Int32)
	mgr.Subscribe(func(e cm.Event) {
		if e.Type == cm.ClusterOffline && e.Child == "fleet/b" && ctrl.inShutdown.Load() > 0 {
			early.Add(1)
		}
	})
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	return clk, b, ctrl, fleet, mgr, log, early
}
