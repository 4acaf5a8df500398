package controllermanager_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// Starts by hand racing a member's outages and their ends: StartChild of
// the member's group, of its controller and of the fleet, sent again and
// again, and a RestartChild of the fleet at each flip, while the member
// goes Offline and Online five times. The member group's admission answers them in the
// supervisor's mailbox, under the fleet's lock, while the member's loop
// takes that lock to say Offline or to start the group itself: every call
// is answered (none hangs: each has 20s), each answer is one a caller can
// act on, and the fleet follows the cluster each time. Then, Offline at
// rest, no start by hand runs the member's controller: the group's start
// and the controller's are refused with ErrClusterOffline, and a restart
// or start of the fleet leaves the group stopped.
func TestAttackFleetStartsByHandRaceAnOutage(t *testing.T) {
	clk, a, _, bl, fleet, mgr, log := oneMemberOnline(t)
	runs := func() (n int32) {
		for _, c := range bl.of("a") {
			n += c.runs.Load()
		}
		return n
	}
	stateIs := func(cluster cm.ClusterState, group supervisor.ChildState) func() bool {
		return func() bool {
			st, _ := fleet.Cluster("a")
			cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
			return st.State == cluster && ok && cs.State == group
		}
	}

	calls := []func(context.Context) error{
		func(ctx context.Context) error { return mgr.StartChild(ctx, "fleet/a") },
		func(ctx context.Context) error { return mgr.StartChild(ctx, "fleet/a/ctrl") },
		func(ctx context.Context) error { return mgr.StartChild(ctx, "fleet") },
	}
	// What a start by hand may be answered while the fleet moves the
	// member's group: started; refused, Offline; running already; busy (a
	// start or stop of it in flight); cut short by the loop's stop.
	answers := []error{cm.ErrClusterOffline, supervisor.ErrAlreadyRunning, supervisor.ErrBusy, supervisor.ErrChildStopped}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []error
	var mu sync.Mutex
	var offline atomic.Int32
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := calls[i%len(calls)](ctx)
			cancel()
			if err == nil || slicesContainsIs(err, answers) {
				if errors.Is(err, cm.ErrClusterOffline) {
					offline.Add(1)
				}
				continue
			}
			mu.Lock()
			bad = append(bad, err)
			mu.Unlock()
			return
		}
	})
	// A restart of the fleet restarts its runner, whose new loops probe
	// afresh: one a flip, not in the loop above, or the member would never
	// stay probed long enough to move.
	restart := func() {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := mgr.RestartChild(ctx, "fleet"); err != nil && !slicesContainsIs(err, answers) {
				mu.Lock()
				bad = append(bad, err)
				mu.Unlock()
			}
		})
	}
	for range 5 {
		a.set(memberFailing)
		restart()
		log.waitUntil(t, clk, fleetPeriod, stateIs(cm.ClusterStateOffline, supervisor.StateStopped))
		a.set(memberOK)
		restart()
		log.waitUntil(t, clk, fleetPeriod, stateIs(cm.ClusterStateOnline, supervisor.StateRunning))
	}
	close(stop)
	wg.Wait()
	require.Empty(t, bad, "a start by hand answered with an error no caller expects (or not within 20s)")
	t.Logf("starts by hand refused as Offline during the flips: %d", offline.Load())

	a.set(memberFailing)
	log.waitUntil(t, clk, fleetPeriod, stateIs(cm.ClusterStateOffline, supervisor.StateStopped))
	before := runs()
	ctx := context.Background()
	for range 3 {
		require.ErrorIs(t, mgr.StartChild(ctx, "fleet/a"), cm.ErrClusterOffline)
		require.ErrorIs(t, mgr.StartChild(ctx, "fleet/a/ctrl"), cm.ErrClusterOffline)
		require.NoError(t, mgr.RestartChild(ctx, "fleet"))
		require.NoError(t, mgr.StopChild(ctx, "fleet"))
		require.NoError(t, mgr.StartChild(ctx, "fleet"))
	}
	require.Equal(t, before, runs(), "a start by hand ran the Offline member's controller")
	cs, _ := fleetChild(t, mgr, "fleet/a")
	require.Equal(t, supervisor.StateStopped, cs.State)

	a.set(memberOK)
	log.waitUntil(t, clk, fleetPeriod, stateIs(cm.ClusterStateOnline, supervisor.StateRunning))
}

func slicesContainsIs(err error, targets []error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// heldAtShutdown is a member's controller whose Shutdown, in the first
// build only, says it was entered and waits until released.
type heldAtShutdown struct {
	entered, release chan struct{} // nil: returns at once
	once             sync.Once     // entered is closed once
}

func (c *heldAtShutdown) Name() string              { return "ctrl" }
func (c *heldAtShutdown) Run(context.Context) error { return nil }
func (c *heldAtShutdown) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}
func (c *heldAtShutdown) Shutdown(ctx context.Context) {
	if c.entered == nil {
		return
	}
	c.once.Do(func() { close(c.entered) })
	select {
	case <-c.release:
	case <-ctx.Done():
	}
}

// heldFleetOnline starts a fleet of one member, a, Online, whose first
// build's controller holds its Shutdown until first.release is closed
// (later builds' return at once); builds counts the builds.
func heldFleetOnline(t *testing.T) (*clocktesting.FakeClock, *fakeMember, *handProvider, *heldAtShutdown, *atomic.Int32, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	first := &heldAtShutdown{entered: make(chan struct{}), release: make(chan struct{})}
	builds := new(atomic.Int32)
	fleet := cm.NewFleet("fleet", prov, func(cm.Cluster) []cm.Runnable {
		if builds.Add(1) == 1 {
			return []cm.Runnable{first}
		}
		return []cm.Runnable{&heldAtShutdown{}}
	}, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	return clk, a, prov, first, builds, fleet, mgr, log
}

// A member's group built for a config replaced since is still in the tree
// while its loop removes it (its controller's Shutdown holds the removal):
// a start by hand of it, or of its controller, is refused with
// ErrClusterDisengaged, since the loop never starts it and its Cluster
// refuses writes. Then the new config's subtree runs.
func TestFleetStartByHandOfAReplacedSubtreeIsRefused(t *testing.T) {
	clk, a, prov, first, builds, _, mgr, log := heldFleetOnline(t)

	rotated := a.config()
	rotated.BearerToken = "token-2"
	require.NoError(t, prov.Engage(t, "a", rotated))
	awaitRecv(t, first.entered, "the old controller's Shutdown")
	ctx := context.Background()
	for _, err := range []error{mgr.StartChild(ctx, "fleet/a"), mgr.RestartChild(ctx, "fleet/a/ctrl")} {
		require.ErrorIs(t, err, cm.ErrClusterDisengaged)
		require.ErrorContains(t, err, "built for a config replaced since")
	}
	close(first.release)
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/a"))
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
		return ok && cs.State == supervisor.StateRunning
	})
	require.EqualValues(t, 2, builds.Load())
}

// The loop's verdict that a member does not answer comes before its
// status says Offline: the status changes once the loop has stopped the
// group. A start by hand taken between the two used to pass the
// admission, which read the status only, and run the group on, unseen by
// the loop, for the whole outage (found by a review with a delay injected
// after the stop). The admission now reads the verdict too: here the
// stop is held in the controller's Shutdown, the status still Online, and
// a start by hand of the group or of its controller is refused with
// ErrClusterOffline, where it used to be answered ErrBusy.
func TestFleetStartByHandBetweenVerdictAndOfflineIsRefused(t *testing.T) {
	clk, a, _, first, builds, fleet, mgr, log := heldFleetOnline(t)

	a.set(memberFailing)
	log.waitUntil(t, clk, fleetPeriod, closedYet(first.entered))
	st, _ := fleet.Cluster("a")
	require.Equal(t, cm.ClusterStateOnline, st.State, "said Offline only once the group has stopped")
	ctx := context.Background()
	for _, name := range []string{"fleet/a", "fleet/a/ctrl"} {
		err := mgr.StartChild(ctx, name)
		require.ErrorIs(t, err, cm.ErrClusterOffline, name)
		require.ErrorContains(t, err, `cluster "a" does not answer`)
	}
	close(first.release)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	cs, _ := fleetChild(t, mgr, "fleet/a/ctrl")
	require.Equal(t, supervisor.StateStopped, cs.State)
	require.EqualValues(t, 1, builds.Load(), "built once: no rotation, no re-add")
}

// A start by hand of a group above an Offline member's group leaves that
// group as it is, its budget included: the restarts its children spent
// before the outage still count once it is back. Before be73075 the start
// reset them, since the budgets were reset before the pruning (this test
// fails with the pruning left out of resetBudgets: Spent 0).
func TestFleetStartOfAGroupAboveKeepsAnOfflineMembersBudget(t *testing.T) {
	clk, a, _, bl, fleet, mgr, log := oneMemberOnline(t)
	ctx := context.Background()
	ctrl := bl.of("a")[0]
	ctrl.fail.Store(true)
	require.Error(t, mgr.RestartChild(ctx, "fleet/a/ctrl"), "its start fails")
	ctrl.fail.Store(false)
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
		return ok && cs.State == supervisor.StateRunning && cs.Restarts >= 2
	})
	group, _ := fleetChild(t, mgr, "fleet/a")
	require.NotNil(t, group.Group)
	spent := group.Group.Spent
	require.Positive(t, spent, "the failed start's restart counts against the member group's budget")

	a.set(memberFailing)
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		st, _ := fleet.Cluster("a")
		cs, ok := fleetChild(t, mgr, "fleet/a")
		return st.State == cm.ClusterStateOffline && ok && cs.State == supervisor.StateStopped
	})
	// A StartChild gives what it starts a fresh budget (a RestartChild of a
	// running group does not).
	require.NoError(t, mgr.StopChild(ctx, "fleet"))
	require.NoError(t, mgr.StartChild(ctx, "fleet"))
	group, _ = fleetChild(t, mgr, "fleet/a")
	require.Equal(t, supervisor.StateStopped, group.State)
	require.Equal(t, spent, group.Group.Spent, "the member group's budget, left as it was")
}

// A RestartChild of the fleet taken between a member's verdict and its
// Offline status (its controller's Shutdown held, so the group is still
// stopping): the start by hand leaves the member's group as it is, and so
// its stopping child is not the request's business. It used to answer
// ErrBusy for the whole of that Shutdown, however long; now the fleet's
// runner restarts, and the member's stop goes on under the loop, which
// then sees the cluster Offline and, once it answers again, Online.
func TestFleetRestartBesideAStoppingOfflineMemberLeavesItAlone(t *testing.T) {
	clk, a, _, first, builds, fleet, mgr, log := heldFleetOnline(t)

	a.set(memberFailing)
	log.waitUntil(t, clk, fleetPeriod, closedYet(first.entered))
	cs, _ := fleetChild(t, mgr, "fleet/a/ctrl")
	require.Equal(t, supervisor.StateStopping, cs.State)
	require.NoError(t, mgr.RestartChild(context.Background(), "fleet"))
	log.waitForNth(t, 2, is(cm.ChildStarted, "fleet/provider"))
	cs, _ = fleetChild(t, mgr, "fleet/a/ctrl")
	require.Equal(t, supervisor.StateStopping, cs.State, "left as it was")

	close(first.release)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	cs, _ = fleetChild(t, mgr, "fleet/a/ctrl")
	require.Equal(t, supervisor.StateStopped, cs.State)
	require.Equal(t, 1, log.count(is(cm.ChildStarted, "fleet/a/ctrl")), "not started by the restart")

	a.set(memberOK)
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	require.EqualValues(t, 1, builds.Load(), "started again in place: no rotation, no re-add")
}
