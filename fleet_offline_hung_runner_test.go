package controllermanager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// Two mechanisms at once: a member goes Offline and its controller's
// Shutdown hangs (a call to the unreachable member with no deadline), and
// while that stop is held the fleet's provider child is restarted by hand.
// The other member runs on undisturbed; the held member is said Offline,
// is not started again beside its hung Shutdown when it answers again,
// not even by the provider's new incarnation, and comes back Online, its
// subtree started again, only after the Shutdown returns. The manager never leaves
// Running and stops cleanly.
func TestFleetOfflineStopHeldAcrossAProviderRestart(t *testing.T) {
	var mu sync.Mutex
	built := map[string][]*hangingCtrl{}
	f := startHeldOffline(t, func(c cm.Cluster, release <-chan struct{}) []cm.Runnable {
		h := &hangingCtrl{}
		if c.Name() == "b" {
			h.release = release
		}
		mu.Lock()
		built[c.Name()] = append(built[c.Name()], h)
		mu.Unlock()
		return []cm.Runnable{h}
	})
	builds := func(name string) []*hangingCtrl {
		mu.Lock()
		defer mu.Unlock()
		return append([]*hangingCtrl(nil), built[name]...)
	}
	clk, b, mgr, log, free := f.clk, f.b, f.mgr, f.log, f.free
	cs, ok := fleetChild(t, mgr, "fleet/b/hung")
	require.True(t, ok)
	require.Equal(t, supervisor.StateStopping, cs.State, "its Shutdown is held")

	// The provider restarted while the stop is held: its Shutdown waits
	// for the member loops, which wait (bounded) for the group's stop.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	restarted := make(chan error, 1)
	go func() { restarted <- mgr.RestartChild(ctx, "fleet/provider") }()
	var rerr error
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		select {
		case rerr = <-restarted:
			return true
		default:
			return false
		}
	})
	require.NoError(t, rerr, "the provider's restart")
	log.waitFor(t, nil, 0, is(cm.ChildRestarted, "fleet/provider"))

	// b answers again while its old Shutdown is still held: nothing is
	// built beside it, however long the probes say it is ready.
	b.set(memberOK)
	settleProbes(t, clk, log, b, 5)
	require.Len(t, builds("b"), 1, "b built again beside its hung Shutdown")
	require.Equal(t, int32(1), builds("b")[0].runs.Load(), "b started again beside its hung Shutdown")
	cs, ok = fleetChild(t, mgr, "fleet/b/hung")
	require.True(t, ok)
	require.Equal(t, supervisor.StateStopping, cs.State)

	free()
	log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/b"))
	bb := builds("b")
	require.Len(t, bb, 1, "an outage stops a member's subtree, it does not rebuild it")
	require.Equal(t, int32(2), bb[0].runs.Load(), "b started again once its Shutdown returned")
	aa := builds("a")
	require.Len(t, aa, 1, "a was kept across the provider's restart")
	require.Equal(t, int32(1), aa[0].runs.Load(), "a ran on undisturbed")
	require.Equal(t, 1, log.count(is(cm.ClusterOnline, "fleet/a")), "a said Online once")

	st, err := mgr.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, supervisor.PhaseRunning, st.Phase)
	require.Zero(t, log.count(func(e cm.Event) bool { return e.Type == cm.Escalated }))
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	mgr.ShutdownAndWait(sctx)
	require.NoError(t, mgr.Err())
}

// The manager's shutdown meets a member's Offline stop held by a hung
// Shutdown: ShutdownAndWait returns within its context and names the
// member's hung child, with its stack; the other member is stopped.
func TestFleetShutdownMeetsAHeldOfflineStop(t *testing.T) {
	var mu sync.Mutex
	ctrls := map[string]*clusterCtrl{}
	f := startHeldOffline(t, func(c cm.Cluster, release <-chan struct{}) []cm.Runnable {
		if c.Name() == "b" {
			return []cm.Runnable{&hangingCtrl{release: release}}
		}
		cc := &clusterCtrl{cluster: c}
		mu.Lock()
		ctrls[c.Name()] = cc
		mu.Unlock()
		return []cm.Runnable{cc}
	})
	clk, mgr, log := f.clk, f.mgr, f.log

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		mgr.ShutdownAndWait(ctx)
	}()
	// The manager's clock bounds each stop: step it while the shutdown runs.
	log.waitUntil(t, clk, 500*time.Millisecond, closedYet(done))
	err := mgr.Err()
	t.Logf("ShutdownAndWait returned after %s: %v", time.Since(began), err)
	var uerr *supervisor.UnstoppedError
	require.ErrorAs(t, err, &uerr, "the hung member's Shutdown is named: %v", err)
	var names []string
	for _, c := range uerr.Children {
		names = append(names, c.Name)
	}
	require.Contains(t, names, "fleet/b/hung")
	mu.Lock()
	ca := ctrls["a"]
	mu.Unlock()
	// Stopped within the context, or on after it (a loaded machine): the
	// shutdown goes on past ShutdownAndWait's return.
	require.Eventually(t, func() bool { return ca.stops.Load() == 1 }, 20*time.Second, 5*time.Millisecond,
		"the other member was stopped")
}

// heldOffline is a fleet of members a and b whose controllers build makes
// (release ends the hung Shutdowns), with a 1s ShutdownTimeout: started,
// both Online, then b's API server down and b said Offline.
type heldOffline struct {
	clk  *clocktesting.FakeClock
	b    *fakeMember
	mgr  *cm.ControllerManager
	log  *eventLog
	free func() // releases every hung Shutdown; also at the test's end
}

func startHeldOffline(t *testing.T, build func(c cm.Cluster, release <-chan struct{}) []cm.Runnable) heldOffline {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	spec := fleetSpec()
	spec.Supervision.ShutdownTimeout = metav1.Duration{Duration: time.Second}
	fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable { return build(c, release) }, spec)
	mgr, log := fleetManager(t, clk, fleet)
	t.Cleanup(free) // runs before the manager's shutdown
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	b.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/b"))
	return heldOffline{clk: clk, b: b, mgr: mgr, log: log, free: free}
}
