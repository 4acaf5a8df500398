package controllermanager_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// ReportClusterProblem, engage and disengage hammered with the provider's
// first context across a stand-down and re-election (LeaseLostReelect):
// every call returns, the re-elected manager runs the engaged cluster on a
// live Context, no controller started on an ended one, and the shutdown
// that follows ends every Context.
func TestAttackFleetProblemsAcrossReelection(t *testing.T) {
	a := newFakeMember(t, memberOK)
	prov := &ctxProvider{ready: make(chan struct{}), initial: map[string]*rest.Config{"a": a.config()}}
	f := startElectedFleet(t, cm.LeaseLostReelect, 1, a, prov)
	m := f.m
	awaitRecv(t, prov.ready, "the provider's Run")
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
	f.reelect(t)
	close(stop)
	wg.Wait()
	require.Zero(t, f.stale.Load(), "controllers started on an ended Context (of %d runs)", f.runs.Load())
	sctx, scancel := context.WithTimeout(context.Background(), elWait)
	defer scancel()
	m.ShutdownAndWait(sctx)
	require.NoError(t, sctx.Err())
	<-m.Done()
	f.requireClustersEnded(t)
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
