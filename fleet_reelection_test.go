package controllermanager_test

import (
	"context"
	"fmt"
	clocktesting "k8s.io/utils/clock/testing"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// Found by a hostile read of the fleet (stop 55); each test fails at the
// commit before its fix.

// ctxCtrl records, at each Run, whether its cluster's Context had ended
// already: a controller started for a cluster the fleet has let go.
type ctxCtrl struct {
	cluster cm.Cluster
	stale   *atomic.Int32
	runs    *atomic.Int32
}

func (c *ctxCtrl) Run(context.Context) error {
	c.runs.Add(1)
	if c.cluster.Context().Err() != nil {
		c.stale.Add(1)
	}
	return nil
}
func (c *ctxCtrl) Shutdown(context.Context) {}
func (c *ctxCtrl) Name() string             { return "ctrl" }
func (c *ctxCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

func managerPhase(m *cm.ControllerManager) supervisor.Phase {
	st, err := m.Status(context.Background())
	if err != nil {
		return ""
	}
	return st.Phase
}

// A replica re-elected (lease lost, LeaseLostReelect, then won again).
// Before, the stand-down ended every member's Context() while the members'
// groups stayed in the tree, and the next start round started their
// controllers on the dead Cluster (writes refused with
// ErrClusterDisengaged) before the loop rebuilt them: two starts a member
// per re-election. The clusters now live until the manager shuts down.
func TestFleetReelectionKeepsItsClusters(t *testing.T) {
	for _, shards := range []int32{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			f := startElectedFleet(t, cm.LeaseLostReelect, shards, newFakeMember(t, memberOK), nil)
			stale, runs := &f.stale, &f.runs
			f.reelect(t)
			t.Logf("runs %d stale %d", runs.Load(), stale.Load())
			require.Zero(t, stale.Load(), "controllers started with their Cluster's Context ended (of %d runs)", runs.Load())
		})
	}
}

// A provider reports a problem with a cluster right as its loop
// disengages it (Secret deleted, then a broken one of the same name
// appears). Clusters() ends listing it Failed with the problem, so the
// last word of the events on it must be its ClusterEngaged (with Err), not
// the old member's ClusterDisengaged. Before, engage waited for the
// leaving member and ReportClusterProblem did not.
func TestFleetProblemReportedAsItIsDisengagedEndsListed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, prov, fleet, _, log := ctxFleetOnline(t, clk)
	prov.mu.Lock()
	ctx, engage, disengage := prov.ctx, prov.engage, prov.disengage
	prov.mu.Unlock()
	for round := range 40 {
		disengage("a")
		deadline := time.Now().Add(elWait)
		for _, ok := fleet.Cluster("a"); ok; _, ok = fleet.Cluster("a") {
			require.True(t, time.Now().Before(deadline), "round %d: not disengaged", round)
		}
		cm.ReportClusterProblem(ctx, "a", fmt.Errorf("round %d: broken", round))
		// Settle: the member is listed (Failed, with its problem), and its
		// ClusterDisengaged has been published.
		log.waitUntil(t, nil, 0, func() bool {
			_, ok := fleet.Cluster("a")
			return ok && log.count(is(cm.ClusterDisengaged, "fleet/a")) >= round+1 &&
				log.count(func(e cm.Event) bool { return e.Type == cm.ClusterEngaged && e.Child == "fleet/a" && e.Err != nil }) >= round+1
		})
		var last cm.EventType
		for _, e := range log.all() {
			if e.Child == "fleet/a" && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterDisengaged) {
				last = e.Type
			}
		}
		st, _ := fleet.Cluster("a")
		require.Equal(t, cm.ClusterEngaged, last, "round %d: Clusters() lists a (%s, problem %v) but the last event on it is %s", round, st.State, st.Problem, last)
		// Back to an engaged, Online a for the next round.
		require.NoError(t, engage("a", a.config()))
		log.waitUntil(t, clk, fleetPeriod, func() bool {
			st, ok := fleet.Cluster("a")
			return ok && st.State == cm.ClusterStateOnline
		})
	}
}

// electedFleet is a manager electing over a leasetest server (one Lease,
// or shards), with a fleet whose build gives each member one ctxCtrl,
// counting its runs and its starts on an ended Cluster, and keeps every
// Cluster it built.
type electedFleet struct {
	m           *cm.ControllerManager
	client      *leasetest.Client
	log         *eventLog
	stale, runs atomic.Int32
	mu          sync.Mutex
	clusters    []cm.Cluster
}

// startElectedFleet starts an electedFleet whose provider is prov (nil: a
// hand provider engaging a as "a"), and waits until a is Online and its
// controller has run. The test's cleanup shuts it down.
func startElectedFleet(t *testing.T, onLost cm.LeaseLostAction, shards int32, a *fakeMember, prov cm.ClusterProvider) *electedFleet {
	t.Helper()
	f := &electedFleet{}
	f.start(t, onLost, shards, a, prov, func(c cm.Cluster) []cm.Runnable {
		f.mu.Lock()
		f.clusters = append(f.clusters, c)
		f.mu.Unlock()
		return []cm.Runnable{&ctxCtrl{cluster: c, stale: &f.stale, runs: &f.runs}}
	})
	pollUntil(t, elWait, func() string {
		if f.runs.Load() == 0 {
			return "not run"
		}
		return ""
	})
	return f
}

// start starts f's manager, elected on a leasetest server, with a fleet
// whose clusters build makes the children of, and waits until a is
// Online. The test's cleanup shuts it down.
func (f *electedFleet) start(t *testing.T, onLost cm.LeaseLostAction, shards int32, a *fakeMember, prov cm.ClusterProvider, build func(cm.Cluster) []cm.Runnable) {
	t.Helper()
	f.client = leasetest.NewServer().Client("a")
	spec := elSpec(onLost)
	if shards > 1 {
		spec.Shards = shards
	}
	m, err := cm.NewControllerManager(cm.NewContext(f.client),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	if prov == nil {
		prov = newHandProvider(map[string]*rest.Config{"a": a.config()})
	}
	m.Add(cm.NewFleet("fleet", prov, build, fleetSpec()))
	f.m, f.log = m, subscribe(t, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	f.log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
}

// reelect cuts the manager off the API server until it stands down, then
// lets it back and waits until it runs fleet/a's controller again.
func (f *electedFleet) reelect(t *testing.T) {
	t.Helper()
	f.client.Partition(true)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(f.m); p == supervisor.PhaseRunning {
			return "still running"
		}
		return ""
	})
	f.client.Partition(false)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(f.m); p != supervisor.PhaseRunning {
			return "phase " + string(p)
		}
		cs, ok := fleetChild(t, f.m, "fleet/a/ctrl")
		if !ok || cs.State != supervisor.StateRunning {
			return "fleet/a/ctrl not running"
		}
		if f.runs.Load() < 2 {
			return "not run again"
		}
		return ""
	})
}

// requireClustersEnded: every Cluster the fleet built has its Context
// ended (the manager has stopped).
func (f *electedFleet) requireClustersEnded(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.clusters)
	for i, c := range f.clusters {
		require.Error(t, c.Context().Err(), "cluster %d's Context still open after the manager stopped (%s)", i, managerPhase(f.m))
	}
}

// ctxFleetOnline starts a manager with a fleet whose ctxProvider engages
// one member, "a", and waits until a is Online.
func ctxFleetOnline(t *testing.T, clk *clocktesting.FakeClock) (*fakeMember, *ctxProvider, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	a := newFakeMember(t, memberOK)
	prov := &ctxProvider{ready: make(chan struct{}), initial: map[string]*rest.Config{"a": a.config()}}
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	awaitRecv(t, prov.ready, "the provider's Run")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	return a, prov, fleet, mgr, log
}

// ctxProvider keeps its Run's ctx, engage and disengage for the test.
type ctxProvider struct {
	mu        sync.Mutex
	ctx       context.Context
	engage    func(string, *rest.Config) error
	disengage func(string)
	ready     chan struct{}
	initial   map[string]*rest.Config
}

func (p *ctxProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	for n, c := range p.initial {
		if err := engage(n, c); err != nil {
			return err
		}
	}
	p.mu.Lock()
	first := p.ctx == nil
	p.ctx, p.engage, p.disengage = ctx, engage, disengage
	p.mu.Unlock()
	if first {
		close(p.ready)
	}
	<-ctx.Done()
	return nil
}

// A running fleet added to a second manager. Before, the second manager's
// refusal ("added to two managers", no sentinel) shut down the shared
// runner's incarnation, the first manager's: its provider stopped and a
// disengage never took effect there. Now the add is refused with
// ErrFleetInUse before anything is sent, and the first manager's fleet
// runs on.
func TestFleetAddedToASecondManagerIsRefused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	_, prov, fleet, mgr1, log := ctxFleetOnline(t, clk)
	prov.mu.Lock()
	pctx, disengage := prov.ctx, prov.disengage
	prov.mu.Unlock()

	mgr2, _ := fleetManager(t, clk)
	startFleet(t, mgr2)
	err := mgr2.AddChild(context.Background(), fleet)
	require.ErrorIs(t, err, cm.ErrFleetInUse)
	err = mgr2.AddChild(context.Background(), cm.NewGroup("outer", cm.SupervisionSpec{}, fleet))
	require.ErrorIs(t, err, cm.ErrFleetInUse, "inside a group too")
	_, ok := fleetChild(t, mgr2, "fleet")
	require.False(t, ok, "nothing added to the second manager")

	require.NoError(t, pctx.Err(), "the first manager's provider was stopped by the second manager's refusal")
	disengage("a")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	_, ok = fleetChild(t, mgr1, "fleet/a")
	require.False(t, ok, "the first manager's fleet disengages as ever")
}

// A fleet added under a running group by supervisor.AddChild's Parent ("a
// fleet goes wherever a group goes"). Before, only AddChild and Add told a
// fleet its manager, and its runner failed "not added to a manager".
func TestFleetAddedUnderAGroupByRequestRuns(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	mgr, log := fleetManager(t, clk, cm.NewGroup("outer", cm.SupervisionSpec{}, &clusterCtrl{}))
	startFleet(t, mgr)
	fleet := cm.NewFleet("inner", cm.StaticClusters(map[string]*rest.Config{"a": a.config()}), bl.build, fleetSpec())
	_, err := mgr.Request(context.Background(), supervisor.AddChild{Parent: "outer", Runnable: fleet})
	require.NoError(t, err)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "outer/inner/a"))
}

// RemoveChild of the fleet's runner alone. Before, the members were
// disengaged (Context ended, ClusterDisengaged, gone from Clusters) while
// their groups stayed in the tree, their controllers running on a Cluster
// whose writes are refused. Their groups now go as a disengage takes them.
func TestFleetRunnerRemovedAloneTakesItsMembersGroups(t *testing.T) {
	_, _, _, bl, fleet, mgr, log := oneMemberOnline(t)
	require.NoError(t, mgr.RemoveChild(context.Background(), "fleet/provider"))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	require.Empty(t, fleet.Clusters())
	_, ok := fleetChild(t, mgr, "fleet/a")
	require.False(t, ok, "fleet/a still in the tree, its Cluster disengaged")
	require.Error(t, bl.of("a")[0].cluster.Context().Err())
	_, ok = fleetChild(t, mgr, "fleet")
	require.True(t, ok, "the fleet's group stays: it was not removed")
}
