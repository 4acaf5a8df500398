package controllermanager_test

import (
	"context"
	"fmt"
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

// ReportClusterProblem, engage and disengage hammered with the provider's
// first context across a stand-down and re-election (LeaseLostReelect):
// every call returns, the re-elected manager runs the engaged cluster on a
// live Context, no controller started on an ended one, and the shutdown
// that follows ends every Context.
func TestAttackFleetProblemsAcrossReelection(t *testing.T) {
	a := newFakeMember(t, memberOK)
	var stale, runs atomic.Int32
	var mu sync.Mutex
	var clusters []cm.Cluster
	build := func(c cm.Cluster) []cm.Runnable {
		mu.Lock()
		clusters = append(clusters, c)
		mu.Unlock()
		return []cm.Runnable{&ctxCtrl{cluster: c, stale: &stale, runs: &runs}}
	}
	srv := leasetest.NewServer()
	client := srv.Client("a")
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostReelect), Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	prov := &ctxProvider{ready: make(chan struct{}), initial: map[string]*rest.Config{"a": a.config()}}
	fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
	m.Add(fleet)
	log := subscribe(t, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	awaitRecv(t, prov.ready, "the provider's Run")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	prov.mu.Lock()
	pctx, engage, disengage := prov.ctx, prov.engage, prov.disengage
	prov.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := []string{"b", "c"}[(i+g)%2]
				switch i % 3 {
				case 0:
					cm.ReportClusterProblem(pctx, name, fmt.Errorf("broken %d", i))
				case 1:
					_ = engage("a", a.config()) // equal: a no-op
				case 2:
					disengage(name)
				}
			}
		}(g)
	}
	client.Partition(true)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(m); p == supervisor.PhaseRunning {
			return "still running"
		}
		return ""
	})
	client.Partition(false)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(m); p != supervisor.PhaseRunning {
			return "phase " + string(p)
		}
		cs, ok := fleetChild(t, m, "fleet/a/ctrl")
		if !ok || cs.State != supervisor.StateRunning {
			return "fleet/a/ctrl not running"
		}
		if runs.Load() < 2 {
			return "not run again"
		}
		return ""
	})
	close(stop)
	wg.Wait()
	require.Zero(t, stale.Load(), "controllers started on an ended Context (of %d runs)", runs.Load())
	sctx, scancel := context.WithTimeout(context.Background(), elWait)
	defer scancel()
	m.ShutdownAndWait(sctx)
	require.NoError(t, sctx.Err())
	<-m.Done()
	mu.Lock()
	defer mu.Unlock()
	for i, c := range clusters {
		require.Error(t, c.Context().Err(), "cluster %d's Context open after the manager stopped", i)
	}
}

// A standby blocked in Start (its Lease watch stalled, on client-go's
// plain fake at 100 ms a call) is shut down from three goroutines at
// once: Start returns an error, every ShutdownAndWait returns within its
// context, Err is nil (a requested shutdown) and Status says Stopped; the
// standby never ran its controller.
func TestAttackStandbyShutdownWhileWatchStalled(t *testing.T) {
	srv, activity := newFakeServer("NewClientset-100ms"), newElActivity(t)
	a := newFakeReplica(t, srv, "a", 1, activity)
	elEventuallyWithin(t, fakeSettleWait, "a leads", func() bool { return a.holds(t) == 1 })
	b := newFakeReplica(t, srv, "b", 1, activity)
	elEventuallyWithin(t, fakeSettleWait, "b sees a lead", func() bool {
		st, err := b.m.Status(context.Background())
		return err == nil && st.LeaderIdentity == "a"
	})
	srv.stall("b")
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			b.m.ShutdownAndWait(ctx)
			if ctx.Err() != nil {
				t.Errorf("ShutdownAndWait ran out its context")
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-b.done:
		require.Error(t, err, "b's Start")
	case <-time.After(elWait):
		t.Fatal("b's Start did not return")
	}
	<-b.m.Done()
	require.NoError(t, b.m.Err())
	st, err := b.m.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, supervisor.PhaseStopped, st.Phase)
	for _, s := range activity.snapshot() {
		require.NotEqual(t, "b", s.replica, "the standby ran %s", s.child)
	}
}
