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
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// heldRecoverStore is a member's store whose Recover number holdAt waits until
// release is closed (or its context ends); other Recovers return at once.
type heldRecoverStore struct {
	holdAt   int32
	recovers atomic.Int32
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
}

func (s *heldRecoverStore) Name() string { return "cache" }
func (s *heldRecoverStore) Recover(ctx context.Context) error {
	if s.recovers.Add(1) != s.holdAt {
		return nil
	}
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *heldRecoverStore) Shutdown(context.Context) {}
func (s *heldRecoverStore) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cache", Healthy: true}
}

// heldRecoverFleet: one member "a" answering; its first build is a heldRecoverStore
// (held at Recover number holdAt) and a clusterCtrl.
func heldRecoverFleet(t *testing.T, holdAt int32) (*clocktesting.FakeClock, *fakeMember, *handProvider, *heldRecoverStore, *[]*clusterCtrl, *sync.Mutex, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	store := &heldRecoverStore{holdAt: holdAt, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-store.release:
		default:
			close(store.release)
		}
	})
	var mu sync.Mutex
	ctrls := &[]*clusterCtrl{}
	first := true
	fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable {
		mu.Lock()
		defer mu.Unlock()
		ctrl := &clusterCtrl{cluster: c}
		*ctrls = append(*ctrls, ctrl)
		if first {
			first = false
			return []cm.Runnable{cm.StoreChild(store), ctrl}
		}
		return []cm.Runnable{cm.StoreChild(&heldRecoverStore{}), ctrl}
	}, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	return clk, a, prov, store, ctrls, &mu, fleet, mgr, log
}

// backFromAnOutage takes a, Online, through an outage and back, and waits
// until the loop's start of its group again has entered the store's
// second Recover (heldRecoverFleet(t, 2) holds it).
func backFromAnOutage(t *testing.T, clk *clocktesting.FakeClock, a *fakeMember, store *heldRecoverStore, log *eventLog) {
	t.Helper()
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	a.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
	a.set(memberOK)
	log.waitUntil(t, clk, fleetPeriod, closedYet(store.entered))
}

// requireBuiltOnce fails unless a was built once and its controller has
// run runs times.
func requireBuiltOnce(t *testing.T, mu *sync.Mutex, ctrls *[]*clusterCtrl, runs int32, msg ...any) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, *ctrls, 1, "built again")
	require.EqualValues(t, runs, (*ctrls)[0].runs.Load(), msg...)
}

// settleProbes steps the clock until the member has answered n more
// probes: time for the new loop to read the tree and act on it.
func settleProbes(t *testing.T, clk *clocktesting.FakeClock, log *eventLog, m *fakeMember, n int32) {
	t.Helper()
	target := m.probes.Load() + n
	log.waitUntil(t, clk, fleetPeriod, func() bool { return m.probes.Load() >= target })
}

// onlineAgreesWithTree fails when the fleet says a Online while its
// controller is not Running.
func onlineAgreesWithTree(t *testing.T, fleet *cm.Fleet, mgr *cm.ControllerManager, log *eventLog) {
	t.Helper()
	st, _ := fleet.Cluster("a")
	cs, _ := fleetChild(t, mgr, "fleet/a/ctrl")
	g, _ := fleetChild(t, mgr, "fleet/a")
	t.Logf("cluster %s; group %s; ctrl %s; ClusterOnline events %d", st.State, g.State, cs.State, log.count(is(cm.ClusterOnline, "fleet/a")))
	if st.State == cm.ClusterStateOnline {
		require.Equal(t, supervisor.StateRunning, cs.State, "said Online while its controller is %s (group %s), its store still recovering", cs.State, g.State)
	}
}

// The runner restarts while the member's AddChild waits on its store's
// Recover (the member answering): the loop's answer is lost, the new loop
// reads the tree. It must not say Online while the group is still
// starting, its controller not run.
func TestFleetRunnerRestartDuringAddSaysOnlineOnlyOnceRunning(t *testing.T) {
	clk, a, _, store, ctrls, mu, fleet, mgr, log := heldRecoverFleet(t, 1)
	awaitRecv(t, store.entered, "the store's Recover")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.RestartChild(ctx, "fleet/provider"))
	log.waitForNth(t, 2, is(cm.ChildStarted, "fleet/provider"))
	settleProbes(t, clk, log, a, 3)
	onlineAgreesWithTree(t, fleet, mgr, log)

	close(store.release)
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	requireBuiltOnce(t, mu, ctrls, 1)
}

// The same on the group's start again: the member comes back from an
// outage, the loop's StartChild waits on the store's second Recover, and
// the runner restarts. The new loop must not say Online while the group
// is still starting.
func TestFleetRunnerRestartDuringStartAgainSaysOnlineOnlyOnceRunning(t *testing.T) {
	clk, a, _, store, ctrls, mu, fleet, mgr, log := heldRecoverFleet(t, 2)
	backFromAnOutage(t, clk, a, store, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.RestartChild(ctx, "fleet/provider"))
	log.waitForNth(t, 2, is(cm.ChildStarted, "fleet/provider"))
	settleProbes(t, clk, log, a, 3)
	onlineAgreesWithTree(t, fleet, mgr, log)

	close(store.release)
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	requireBuiltOnce(t, mu, ctrls, 2)
}

// restartRunner restarts the fleet's runner the way how says, and waits
// for its new incarnation.
func restartRunner(t *testing.T, mgr *cm.ControllerManager, log *eventLog, how string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := log.count(is(cm.ChildStarted, "fleet/provider"))
	switch how {
	case "provider":
		require.NoError(t, mgr.RestartChild(ctx, "fleet/provider"))
	case "fleet":
		require.NoError(t, mgr.RestartChild(ctx, "fleet"))
	case "stopstart":
		require.NoError(t, mgr.StopChild(ctx, "fleet/provider"))
		require.NoError(t, mgr.StartChild(ctx, "fleet/provider"))
	}
	log.waitForNth(t, n+1, is(cm.ChildStarted, "fleet/provider"))
}

// A disengage's removal in flight (the controller's Shutdown held) when
// the runner restarts: ClusterDisengaged only once the group is gone.
func TestFleetRunnerRestartDuringDisengageSaysItOnceRemoved(t *testing.T) {
	for _, how := range []string{"provider", "fleet", "stopstart"} {
		t.Run(how, func(t *testing.T) {
			clk, _, prov, first, _, fleet, mgr, log := heldFleetOnline(t)
			noReengage(prov)
			prov.Disengage(t, "a")
			awaitRecv(t, first.entered, "the controller's Shutdown")
			restartRunner(t, mgr, log, how)
			_, said := log.find(is(cm.ClusterDisengaged, "fleet/a"))
			g, in := fleetChild(t, mgr, "fleet/a")
			require.False(t, said && in, "ClusterDisengaged with its group %s in the tree", g.State)
			close(first.release)
			log.waitFor(t, clk, fleetPeriod, is(cm.ClusterDisengaged, "fleet/a"))
			_, in = fleetChild(t, mgr, "fleet/a")
			require.False(t, in, "in the tree after ClusterDisengaged")
			require.Empty(t, fleet.Clusters())
		})
	}
}

// A rotation's removal in flight (the old controller's Shutdown held)
// when the runner restarts: the new subtree is added once the old is gone,
// Online said once, built twice in all.
func TestFleetRunnerRestartDuringRotationAddsTheNewSubtreeOnce(t *testing.T) {
	for _, how := range []string{"provider", "fleet", "stopstart"} {
		t.Run(how, func(t *testing.T) {
			clk, a, prov, first, builds, fleet, mgr, log := heldFleetOnline(t)
			noReengage(prov)
			rotated := a.config()
			rotated.BearerToken = "token-2"
			require.NoError(t, prov.Engage(t, "a", rotated))
			awaitRecv(t, first.entered, "the old controller's Shutdown")
			restartRunner(t, mgr, log, how)
			require.Equal(t, 1, log.count(is(cm.ClusterOnline, "fleet/a")), "Online again before the old subtree has gone")
			require.EqualValues(t, 1, builds.Load())
			close(first.release)
			log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/a"))
			cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
			require.True(t, ok)
			require.Equal(t, supervisor.StateRunning, cs.State)
			st, _ := fleet.Cluster("a")
			require.Equal(t, cm.ClusterStateOnline, st.State)
			require.EqualValues(t, 2, builds.Load())
		})
	}
}

// noReengage: the provider's later Runs engage nothing (a provider whose
// clusters are those engaged by hand since).
func noReengage(p *handProvider) {
	p.mu.Lock()
	p.initial = nil
	p.mu.Unlock()
}

// The runner restarts while the member's AddChild waits on its store; the
// new loop finds the group in the tree. Once it runs, a RemoveChild of the
// group by hand has the fleet build and add it again, as it does for any
// group removed by hand: a new build, not the removed group's children
// (shut down) added again.
func TestFleetGroupRemovedByHandAfterALostAddIsBuiltAgain(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "restarted"}[restart], func(t *testing.T) { removedByHandAfterAdd(t, restart) })
	}
}

func removedByHandAfterAdd(t *testing.T, restart bool) {
	clk, _, _, store, ctrls, mu, fleet, mgr, log := heldRecoverFleet(t, 1)
	awaitRecv(t, store.entered, "the store's Recover")
	if restart {
		restartRunner(t, mgr, log, "provider")
	}
	close(store.release)
	running := aRunsOnline(t, fleet, mgr)
	log.waitUntil(t, clk, fleetPeriod, running)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.RemoveChild(ctx, "fleet/a"))
	log.waitForNth(t, 2, is(cm.ChildStarted, "fleet/a/ctrl"))
	log.waitUntil(t, clk, fleetPeriod, running)
	mu.Lock()
	defer mu.Unlock()
	for i, c := range *ctrls {
		t.Logf("build %d: runs %d stops %d", i, c.runs.Load(), c.stops.Load())
	}
	require.Len(t, *ctrls, 2, "built again after its removal by hand")
	require.EqualValues(t, 1, (*ctrls)[0].runs.Load(), "the removed controller ran again")
}

// A StopChild of the fleet while the member's AddChild waits on its
// store: the add is cut short (ErrChildStopped) as the runner's loop is
// stopped. A StartChild of the fleet starts the runner again, whose loop
// reads the tree: the member's group runs, its controller once.
func TestFleetStoppedDuringAddRunsOnceStartedAgain(t *testing.T) {
	clk, _, _, store, ctrls, mu, fleet, mgr, log := heldRecoverFleet(t, 1)
	awaitRecv(t, store.entered, "the store's Recover")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.StopChild(ctx, "fleet"))
	require.NoError(t, mgr.StartChild(ctx, "fleet"))
	close(store.release)
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	requireBuiltOnce(t, mu, ctrls, 1)
}

// failOnDemand is a provider that engages its clusters, then fails (its
// first Run only) when fail is closed.
type failOnDemand struct {
	initial map[string]*rest.Config
	fail    chan struct{}
	runs    atomic.Int32
}

func (p *failOnDemand) Run(ctx context.Context, engage func(string, *rest.Config) error, _ func(string)) error {
	first := p.runs.Add(1) == 1
	for n, c := range p.initial {
		if err := engage(n, c); err != nil {
			return err
		}
	}
	if first {
		select {
		case <-p.fail:
			panic("provider exploded")
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// The provider panics while the member's AddChild waits on its store: the
// runner is restarted by its supervisor, the add's answer lost.
func TestFleetProviderPanicDuringAddSaysOnlineOnlyOnceRunning(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := &failOnDemand{initial: map[string]*rest.Config{"a": a.config()}, fail: make(chan struct{})}
	store := &heldRecoverStore{holdAt: 1, entered: make(chan struct{}), release: make(chan struct{})}
	defer close(store.release)
	ctrl := &clusterCtrl{}
	fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{cm.StoreChild(store), ctrl}
	}, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	awaitRecv(t, store.entered, "the store's Recover")
	close(prov.fail)
	log.waitUntil(t, clk, fleetPeriod, func() bool { return prov.runs.Load() >= 2 })
	settleProbes(t, clk, log, a, 3)
	onlineAgreesWithTree(t, fleet, mgr, log)
}

// The Offline stop in flight (Shutdown held) when the runner restarts, by
// each of the three ways: Offline only once the group has stopped.
func TestFleetRunnerRestartDuringOfflineStopSaysOfflineOnceStopped(t *testing.T) {
	for _, how := range []string{"provider", "fleet", "stopstart"} {
		t.Run(how, func(t *testing.T) {
			clk, a, prov, first, builds, fleet, mgr, log := heldFleetOnline(t)
			noReengage(prov)
			a.set(memberFailing)
			log.waitUntil(t, clk, fleetPeriod, closedYet(first.entered))
			restartRunner(t, mgr, log, how)
			settleProbes(t, clk, log, a, 3)
			cs, _ := fleetChild(t, mgr, "fleet/a/ctrl")
			st, _ := fleet.Cluster("a")
			require.Equal(t, supervisor.StateStopping, cs.State)
			require.NotEqual(t, cm.ClusterStateOffline, st.State, "Offline while its controller is Stopping")
			require.Zero(t, log.count(is(cm.ClusterOffline, "fleet/a")))
			close(first.release)
			log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
			cs, _ = fleetChild(t, mgr, "fleet/a/ctrl")
			require.Equal(t, supervisor.StateStopped, cs.State)
			a.set(memberOK)
			log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
			require.EqualValues(t, 1, builds.Load())
		})
	}
}

// The Offline stop in flight (Shutdown held) when the runner restarts,
// and the member answers again before the Shutdown returns: the new loop
// probes on meanwhile (the old one waited in its StopChild). Its group is
// stopped and started again: is the outage ever said?
func TestFleetRunnerRestartDuringOfflineStopThenBackSaysTheOutage(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "restarted"}[restart], func(t *testing.T) { offlineStopThenBack(t, restart) })
	}
}

func offlineStopThenBack(t *testing.T, restart bool) {
	clk, a, prov, first, _, fleet, mgr, log := heldFleetOnline(t)
	noReengage(prov)
	a.set(memberFailing)
	log.waitUntil(t, clk, fleetPeriod, closedYet(first.entered))
	if restart {
		restartRunner(t, mgr, log, "provider")
	}
	a.set(memberOK)
	if restart {
		settleProbes(t, clk, log, a, 4) // past SuccessThreshold
	}
	close(first.release)
	log.waitForNthStepping(t, clk, 2, is(cm.ChildStarted, "fleet/a/ctrl"))
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	var seq []string
	for _, e := range log.all() {
		if e.Child == "fleet/a" || e.Child == "fleet/a/ctrl" {
			seq = append(seq, string(e.Type)+" "+e.Child)
		}
	}
	t.Logf("events: %v", seq)
	require.Equal(t, 1, log.count(is(cm.ClusterOffline, "fleet/a")), "its controller stopped and started again, and the outage never said")
}

// A StopChild of the fleet while the member's StartChild (Online again)
// waits on its store: the start is cut short (ErrChildStopped) as the
// runner's loop is stopped. A StartChild of the fleet runs the group again.
func TestFleetStoppedDuringStartAgainRunsOnceStartedAgain(t *testing.T) {
	clk, a, _, store, ctrls, mu, fleet, mgr, log := heldRecoverFleet(t, 2)
	backFromAnOutage(t, clk, a, store, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.StopChild(ctx, "fleet"))
	require.NoError(t, mgr.StartChild(ctx, "fleet"))
	log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
	requireBuiltOnce(t, mu, ctrls, 2)
}

// A StopChild of the member's group by hand while the loop's StartChild
// (Online again) waits on its store: the start is cut short with
// ErrChildStopped. The stop lasts as one taken right after the start
// would: until the loop next moves the group (docs/fleet.md). The
// controller does not run; the store's Recover was cut short.
func TestFleetGroupStoppedByHandDuringStartAgainStaysStopped(t *testing.T) {
	clk, a, _, store, ctrls, mu, _, mgr, log := heldRecoverFleet(t, 2)
	backFromAnOutage(t, clk, a, store, log)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.StopChild(ctx, "fleet/a"))
	log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/a"))
	settleProbes(t, clk, log, a, 3)
	g, _ := fleetChild(t, mgr, "fleet/a")
	require.Equal(t, supervisor.StateStopped, g.State)
	requireBuiltOnce(t, mu, ctrls, 1, "started again after the StopChild")
}

// heldFromStore is a member's store whose Recover number holdFrom and every
// one after it wait until release is closed (or their context ends).
type heldFromStore struct {
	holdFrom int32
	recovers atomic.Int32
	entered  chan struct{} // gets one value per held Recover entered
	release  chan struct{}
}

func (s *heldFromStore) Name() string { return "cache" }
func (s *heldFromStore) Recover(ctx context.Context) error {
	if s.recovers.Add(1) < s.holdFrom {
		return nil
	}
	s.entered <- struct{}{}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *heldFromStore) Shutdown(context.Context) {}
func (s *heldFromStore) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cache", Healthy: true}
}

// failingSibling is a controller whose failure the test reports.
type failingSibling struct {
	mu     sync.Mutex
	report func(error)
}

func (c *failingSibling) Name() string { return "boom" }
func (c *failingSibling) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	return nil
}
func (c *failingSibling) Shutdown(context.Context) {}
func (c *failingSibling) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "boom", Healthy: true}
}
func (c *failingSibling) fail() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(errors.New("boom"))
}

// The fleet restarted by its parent's strategy (AllForOne: a sibling
// failed) while the loop's start of a member back from an outage waits on
// its store's Recover: the loop's answer is lost with the runner, and the
// fleet's restart starts the member's children again, one after another.
// Under sharding the runner is a store, started before the member's: the
// new loop reads the member's group while its store recovers and its
// controller waits its turn (BackingOff). That group is starting, not
// running: ClusterOnline must wait until its controller runs.
func TestFleetRestartedByItsParentSaysOnlineOnlyOnceRunning(t *testing.T) {
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	store := &heldFromStore{holdFrom: 2, entered: make(chan struct{}, 8), release: make(chan struct{})}
	t.Cleanup(func() { close(store.release) })
	var mu sync.Mutex
	var ctrls []*clusterCtrl
	fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable {
		mu.Lock()
		defer mu.Unlock()
		ctrl := &clusterCtrl{cluster: c}
		ctrls = append(ctrls, ctrl)
		return []cm.Runnable{cm.StoreChild(store), ctrl}
	}, cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: 200 * time.Millisecond},
		ProbeTimeout:     metav1.Duration{Duration: 200 * time.Millisecond}, // a probe that times out under load costs a flap, never a wrong verdict
		FailureThreshold: metav1.Duration{Duration: 400 * time.Millisecond},
		SuccessThreshold: metav1.Duration{Duration: 200 * time.Millisecond},
	})
	sibling := &failingSibling{}
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = 2
	sup := gFast()
	sup.Strategy = cm.AllForOne
	mgr, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: sup}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	mgr.Add(sibling, fleet)
	log := subscribe(t, mgr)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, mgr.Start(ctx, 0))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitUntil(t, nil, 0, aRunsOnline(t, fleet, mgr))

	a.set(memberFailing)
	log.waitFor(t, nil, 0, is(cm.ClusterOffline, "fleet/a"))
	a.set(memberOK)
	awaitRecv(t, store.entered, "the store's Recover in the loop's start of the member again")

	runners := log.count(is(cm.ChildStarted, "fleet/provider"))
	sibling.fail()
	log.waitForNth(t, runners+1, is(cm.ChildStarted, "fleet/provider"))
	awaitRecv(t, store.entered, "the store's Recover in the fleet's restart")
	target := a.probes.Load() + 4 // the new loop reads the tree at once, and at each probe
	log.waitUntil(t, nil, 0, func() bool { return a.probes.Load() >= target })
	onlineAgreesWithTree(t, fleet, mgr, log)

	store.release <- struct{}{} // one Recover: the fleet's restart's
	log.waitUntil(t, nil, 0, aRunsOnline(t, fleet, mgr))
}
