package controllermanager_test

import (
	"context"
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

// cutStore is a member's store whose Recover number cutAt (the first
// build's; 0 for the others: never) cuts its member (the member's API
// server stops answering as the informers start) and then waits, as
// informers syncing on a cut do, until its context ends. Its other
// Recovers return at once.
type cutStore struct {
	member   *fakeMember
	cutAt    int32
	recovers atomic.Int32
	returned atomic.Int32  // Recovers that have returned
	started  chan struct{} // closed once the first Recover waits
}

func (s *cutStore) Name() string { return "cache" }
func (s *cutStore) Recover(ctx context.Context) error {
	defer s.returned.Add(1)
	if s.recovers.Add(1) != s.cutAt {
		return nil
	}
	s.member.set(memberFailing)
	close(s.started)
	<-ctx.Done()
	return ctx.Err()
}
func (s *cutStore) Shutdown(context.Context) {}
func (s *cutStore) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cache", Healthy: true}
}

// cutBuilds builds, for each config of member "a", a cutStore (the first
// config's cuts the member at its Recover number cutAt) and a clusterCtrl.
type cutBuilds struct {
	member *fakeMember
	cutAt  int32
	mu     sync.Mutex
	stores []*cutStore
	ctrls  []*clusterCtrl
}

func (b *cutBuilds) build(c cm.Cluster) []cm.Runnable {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &cutStore{member: b.member, started: make(chan struct{})}
	if len(b.stores) == 0 {
		s.cutAt = b.cutAt
	}
	ctrl := &clusterCtrl{cluster: c}
	b.stores, b.ctrls = append(b.stores, s), append(b.ctrls, ctrl)
	return []cm.Runnable{cm.StoreChild(s), ctrl}
}

func (b *cutBuilds) get() ([]*cutStore, []*clusterCtrl) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*cutStore(nil), b.stores...), append([]*clusterCtrl(nil), b.ctrls...)
}

// startCutWhileStoreStarts starts a fleet of one member "a" whose first
// store cuts it as it recovers, and waits until that Recover waits.
func startCutWhileStoreStarts(t *testing.T) (*clocktesting.FakeClock, *fakeMember, *handProvider, *cutBuilds, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	bl := &cutBuilds{member: a, cutAt: 1}
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitUntil(t, nil, 0, func() bool { s, _ := bl.get(); return len(s) == 1 })
	stores, _ := bl.get()
	awaitRecv(t, stores[0].started, "the store's first Recover")
	return clk, a, prov, bl, fleet, mgr, log
}

// A member whose API server stops answering while its group's store
// recovers (informers syncing on a cut) goes Offline after
// FailureThreshold, as any Online member does: its group stopped (the
// store's Recover ended), its controller never started while it is
// Offline; once it answers again for SuccessThreshold it is Online, its
// store recovered first, then its controller. Before, the member's loop
// waited in the group's AddChild, answered only once the store's Recover
// had returned: nothing was probed, and the member stayed Engaging for as
// long as the Recover waited (for good here; ctrlruntime/fleet's
// TestEnvAttackCutWhileStoreStartsGoesOffline).
func TestFleetCutWhileStoreRecoversGoesOffline(t *testing.T) {
	clk, a, _, bl, fleet, mgr, log := startCutWhileStoreStarts(t)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	stores, ctrls := bl.get()
	require.Len(t, stores, 1, "built once")
	log.waitUntil(t, nil, 0, func() bool { return stores[0].returned.Load() == 1 })
	require.Zero(t, ctrls[0].runs.Load(), "the controller of an Offline member started")
	st, ok := fleet.Cluster("a")
	require.True(t, ok)
	require.Equal(t, cm.ClusterStateOffline, st.State)
	if cs, ok := fleetChild(t, mgr, "fleet/a"); ok {
		require.Equal(t, supervisor.StateStopped, cs.State, "the Offline member's group")
	}

	a.set(memberOK)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOnline, "fleet/a"))
	stores, ctrls = bl.get()
	require.Len(t, stores, 1, "built once")
	require.Equal(t, int32(2), stores[0].recovers.Load(), "recovered again before its controller ran")
	require.Equal(t, int32(1), ctrls[0].runs.Load(), "the controller started once, when the member was Online")
	cs, ok := fleetChild(t, mgr, "fleet/a")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// A member disengaged while its group's store recovers on a cut is let go
// without waiting for the Recover: its Context ends, its group is
// removed, its controller never starts. Before, the disengage waited in
// the member's loop behind the group's AddChild.
func TestFleetDisengagedWhileStoreRecoversOnACut(t *testing.T) {
	_, _, prov, bl, fleet, mgr, log := startCutWhileStoreStarts(t)
	prov.Disengage(t, "a")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	stores, ctrls := bl.get()
	require.Len(t, stores, 1)
	require.Equal(t, int32(1), stores[0].returned.Load(), "the store's Recover ended")
	require.Zero(t, ctrls[0].runs.Load(), "the controller of a disengaged member started")
	require.Error(t, ctrls[0].cluster.Context().Err(), "the disengaged Cluster's Context")
	_, ok := fleetChild(t, mgr, "fleet/a")
	require.False(t, ok, "the disengaged member's group is gone")
	_, ok = fleet.Cluster("a")
	require.False(t, ok)
}

// A member rotated while its group's store recovers on a cut gets its new
// subtree without waiting for the Recover: the old group is removed (its
// Recover ended, its controller never started, its Context ended), and the
// new one runs on the new config.
func TestFleetRotatedWhileStoreRecoversOnACut(t *testing.T) {
	clk, a, prov, bl, _, mgr, log := startCutWhileStoreStarts(t)
	rotated := a.config()
	rotated.BearerToken = "token-2"
	a.set(memberOK) // it answers again; the old store's Recover waits on
	require.NoError(t, prov.Engage(t, "a", rotated))
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		_, ctrls := bl.get()
		return len(ctrls) == 2 && ctrls[1].runs.Load() == 1
	})
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOnline, "fleet/a"))
	stores, ctrls := bl.get()
	require.Len(t, stores, 2, "built once more, on the new config")
	require.Equal(t, "token-2", ctrls[1].cluster.Config().BearerToken)
	require.Error(t, ctrls[0].cluster.Context().Err(), "the old Cluster's Context")
	require.Zero(t, ctrls[0].runs.Load(), "the old subtree's controller started")
	cs, ok := fleetChild(t, mgr, "fleet/a")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// The same cut on the group's start again (StartChild), as the member
// comes back from an outage: the store's Recover waits on the cut, and
// once the probes have failed for FailureThreshold the start is given up,
// the group stopped, its controller not started again, the member still
// Offline (it never came Online); a disengage then lets it go. Before, the
// loop waited in the StartChild as it did in the AddChild.
func TestFleetCutWhileStoreRecoversOnItsStartGoesOffline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	bl := &cutBuilds{member: a, cutAt: 2}
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	a.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	a.set(memberOK)
	stores, ctrls := bl.get()
	require.Len(t, stores, 1)
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		select {
		case <-stores[0].started:
			return true
		default:
			return false
		}
	})
	// Still Offline (it never came Online: no event), its probes failing
	// for FailureThreshold: the start is given up, the Recover cut short.
	log.waitUntil(t, clk, fleetPeriod, func() bool { return stores[0].returned.Load() == 2 })
	// The Recover returns as the stop begins; the group is Stopped once it
	// has ended.
	log.waitUntil(t, nil, 0, func() bool {
		cs, ok := fleetChild(t, mgr, "fleet/a")
		return ok && cs.State == supervisor.StateStopped
	})
	require.Equal(t, int32(1), ctrls[0].runs.Load(), "the controller started again on a member Offline")
	require.Equal(t, 1, log.count(is(cm.ClusterOnline, "fleet/a")), "announced Online with its group not running")
	st, ok := fleet.Cluster("a")
	require.True(t, ok)
	require.Equal(t, cm.ClusterStateOffline, st.State)

	prov.Disengage(t, "a")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	_, ok = fleet.Cluster("a")
	require.False(t, ok)
}

// slowNamedCtrl is a member's controller whose first Name call (the
// supervisor naming the group's children as it takes the add) waits until
// release is closed; its Run records whether the member answered then.
type slowNamedCtrl struct {
	member    *fakeMember
	called    chan struct{}
	release   chan struct{}
	first     atomic.Bool
	runs      atomic.Int32
	runsWhile atomic.Int32 // Runs while the member did not answer
}

func (c *slowNamedCtrl) Name() string {
	if c.first.CompareAndSwap(false, true) {
		close(c.called)
		<-c.release
	}
	return "ctrl"
}
func (c *slowNamedCtrl) Run(context.Context) error {
	c.runs.Add(1)
	if memberMode(c.member.mode.Load()) != memberOK {
		c.runsWhile.Add(1)
	}
	return nil
}
func (c *slowNamedCtrl) Shutdown(context.Context) {}
func (c *slowNamedCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

// A member that goes Offline before the supervisor has taken its group's
// add (the add still naming its children) has the add refused when it is
// taken: the loop gave it up, and no group of the Offline member is added
// or started behind it. Once the member answers again, its group is added
// and runs once.
func TestFleetOfflineBeforeItsAddIsTakenRefusesTheAdd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	ctrl := &slowNamedCtrl{member: a, called: make(chan struct{}), release: make(chan struct{})}
	var builds atomic.Int32
	released := false
	defer func() {
		if !released {
			close(ctrl.release)
		}
	}()
	fleet := cm.NewFleet("fleet", prov, func(cm.Cluster) []cm.Runnable {
		builds.Add(1)
		return []cm.Runnable{ctrl}
	}, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	awaitRecv(t, ctrl.called, "the naming of the group's children")

	a.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	_, ok := fleetChild(t, mgr, "fleet/a")
	require.False(t, ok, "the group of an add not taken yet is in the tree")
	close(ctrl.release) // the supervisor takes the add now, and refuses it
	released = true
	// A few probes more while it fails: time for the add to be taken.
	n := a.probes.Load() + 3
	log.waitUntil(t, clk, fleetPeriod, func() bool { return a.probes.Load() >= n })
	require.Zero(t, ctrl.runs.Load(), "the controller of an Offline member started")
	_, ok = fleetChild(t, mgr, "fleet/a")
	require.False(t, ok, "the group of the add given up is in the tree")

	a.set(memberOK)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOnline, "fleet/a"))
	require.Equal(t, int32(1), builds.Load(), "built once for its config")
	require.Equal(t, int32(1), ctrl.runs.Load(), "the controller ran once, Online")
	require.Zero(t, ctrl.runsWhile.Load(), "the controller ran while the member did not answer")
	cs, ok := fleetChild(t, mgr, "fleet/a")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// A member's group removed by hand (RemoveChild) while its add waits for
// its store's Recover, the member answering: the add is cut short and
// answered with ErrChildRemoved, and the member is built and added again,
// as a group removed by hand once running is ("The group is the
// fleet's", docs/fleet.md). Before, the member was said Failed with the
// removal's error, and nothing ran on it until its provider engaged a new
// config (2 of 2).
func TestFleetMemberGroupRemovedByHandDuringItsAddIsAddedAgain(t *testing.T) {
	clk, a, _, bl, fleet, mgr, log := startCutWhileStoreStarts(t)
	a.set(memberOK) // the member answers; its store's Recover waits on
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.RemoveChild(ctx, "fleet/a"))
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	// Built again: the removed group's children were shut down. (A
	// re-add that meets the removal still under way, the interrupted add
	// answered as the stop began, is refused as a duplicate: that build
	// is dropped unused, and the next one is added once it has gone.)
	stores, ctrls := bl.get()
	require.GreaterOrEqual(t, len(stores), 2, "built again")
	require.Equal(t, int32(1), stores[0].returned.Load(), "the first store's Recover was cut short")
	last := len(ctrls) - 1
	for i := range last {
		require.Zero(t, ctrls[i].runs.Load(), "build %d of %d, not the one in the tree, ran", i, len(ctrls))
	}
	require.Equal(t, int32(1), ctrls[last].runs.Load())
	require.NoError(t, ctrls[last].cluster.Context().Err())
	require.Zero(t, log.count(func(e cm.Event) bool { return e.Type == cm.ClusterOffline && e.Child == "fleet/a" }),
		"said Failed or Offline")
}
