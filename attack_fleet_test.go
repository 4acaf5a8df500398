package controllermanager_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/supervisor"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// Engage and disengage one cluster name quickly, alternating configs, from
// two goroutines: in the end a disengaged cluster has nothing running and
// every built controller's Run was matched by its Shutdown, every
// replaced Cluster's Context has ended, and an engaged one runs exactly
// one controller.
func TestAttackFleetEngageDisengageChurn(t *testing.T) {
	for _, end := range []string{"engaged", "disengaged"} {
		t.Run(end, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			a := newFakeMember(t, memberOK)
			prov := newHandProvider(nil)
			bl := newBuilds()
			fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
			mgr, log := fleetManager(t, clk, fleet)
			startFleet(t, mgr)
			cfgs := []*rest.Config{a.config(), {Host: a.srv.URL, BearerToken: "token-2"}}
			var wg sync.WaitGroup
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func(seed int64) {
					defer wg.Done()
					r := rand.New(rand.NewSource(seed))
					for i := 0; i < 60; i++ {
						if r.Intn(3) == 0 {
							prov.Disengage(t, "a")
						} else {
							_ = prov.Engage(t, "a", cfgs[r.Intn(2)])
						}
					}
				}(int64(g))
			}
			wg.Wait()
			final := cfgs[0]
			if end == "engaged" {
				require.NoError(t, prov.Engage(t, "a", final))
			} else {
				prov.Disengage(t, "a")
			}
			live := func() (running int, detail string) {
				for i, c := range bl.of("a") {
					r, s := c.runs.Load(), c.stops.Load()
					if r > s {
						running++
					}
					detail += fmt.Sprintf("[%d runs %d stops %d ctx %v] ", i, r, s, c.cluster.Context().Err())
				}
				return
			}
			if end == "engaged" {
				log.waitUntil(t, clk, fleetPeriod, func() bool {
					st, ok := fleet.Cluster("a")
					n, _ := live()
					return ok && st.State == cm.ClusterStateOnline && n == 1
				})
				// Every build but the last: stopped, its Context ended.
				ctrls := bl.of("a")
				for i, c := range ctrls[:len(ctrls)-1] {
					require.Equal(t, c.runs.Load(), c.stops.Load(), "build %d", i)
					require.Error(t, c.cluster.Context().Err(), "build %d's Context", i)
				}
				last := ctrls[len(ctrls)-1]
				require.NoError(t, last.cluster.Context().Err())
			} else {
				log.waitUntil(t, clk, fleetPeriod, func() bool {
					_, ok := fleet.Cluster("a")
					_, inTree := fleetChild(t, mgr, "fleet/a")
					n, _ := live()
					return !ok && !inTree && n == 0
				})
				for i, c := range bl.of("a") {
					require.Error(t, c.cluster.Context().Err(), "build %d's Context", i)
				}
			}
			// And it stays so (on the real clock: stepping the manager's
			// clock would also time out its health sweeps, whose answers
			// take real time, and restart the controller).
			want := 0
			if end == "engaged" {
				want = 1
			}
			elConsistently(t, 300*time.Millisecond, "the running controllers stay", func() bool {
				n, d := live()
				if n != want {
					t.Logf("running %d want %d: %s", n, want, d)
				}
				return n == want
			})
		})
	}
}

// A fleet's manager stands down (lease lost, LeaseLostReelect) and is shut
// down while it is Electing. Cluster.Context's contract: it "ends when
// the cluster is disengaged, its config is replaced, or the manager shuts
// down". The stand-down stopped the runner keeping the clusters (a
// re-election keeps them); the shutdown that follows finds no runner
// running to end them.
func TestAttackFleetShutdownWhileStandingDownEndsClusters(t *testing.T) {
	for _, shards := range []int32{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			f := startElectedFleet(t, cm.LeaseLostReelect, shards, newFakeMember(t, memberOK), nil)
			m := f.m
			f.client.Partition(true)
			pollUntil(t, 3*elWait, func() string {
				if p := managerPhase(m); p != supervisor.PhaseElecting {
					return "phase " + string(p)
				}
				return ""
			})
			sctx, scancel := context.WithTimeout(context.Background(), elWait)
			defer scancel()
			m.ShutdownAndWait(sctx)
			require.NoError(t, sctx.Err())
			<-m.Done()
			f.requireClustersEnded(t)
		})
	}
}

// The fleet stopped by request (StopChild of it) and then the manager shut
// down: no runner runs at the shutdown, and the clusters' Contexts must
// end all the same.
func TestAttackFleetStoppedThenShutdownEndsClusters(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	stopThenShutdownEndsClusters(t, mgr, bl, "fleet")
}

// stopThenShutdownEndsClusters stops the child at path (a fleet, or a
// group above it), shuts the manager down, and requires every Cluster
// built for member "a" to have ended.
func stopThenShutdownEndsClusters(t *testing.T, mgr *cm.ControllerManager, bl *builds, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, mgr.StopChild(ctx, path))
	mgr.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err())
	<-mgr.Done()
	ctrls := bl.of("a")
	require.NotEmpty(t, ctrls)
	for i, c := range ctrls {
		require.Error(t, c.cluster.Context().Err(), "build %d's Context open after the manager stopped", i)
	}
}

// ReportClusterProblem and engage/disengage hammered from the provider's
// goroutines while the manager shuts down: every call returns, the
// shutdown returns within its context, every built cluster's Context ends.
func TestAttackFleetProblemsDuringShutdown(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := &ctxProvider{ready: make(chan struct{}), initial: map[string]*rest.Config{"a": a.config()}}
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	awaitRecv(t, prov.ready, "the provider's Run")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	prov.mu.Lock()
	pctx, engage, disengage := prov.ctx, prov.engage, prov.disengage
	prov.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := []string{"a", "b", "c"}[(i+g)%3]
				switch i % 4 {
				case 0:
					cm.ReportClusterProblem(pctx, name, fmt.Errorf("broken %d", i))
				case 1:
					_ = engage(name, a.config())
				case 2:
					disengage(name)
				case 3:
					cm.ReportClusterProblem(pctx, name, fmt.Errorf("broken %d", i))
				}
			}
		}(g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	mgr.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err())
	close(stop)
	wg.Wait()
	<-mgr.Done()
	for _, name := range []string{"a", "b", "c"} {
		for i, c := range bl.of(name) {
			require.Error(t, c.cluster.Context().Err(), "%s build %d's Context open after the manager stopped", name, i)
		}
	}
}

// The lease lost with LeaseLostExit: the manager fails; every cluster's
// Context must end with it.
func TestAttackFleetLeaseLostExitEndsClusters(t *testing.T) {
	for _, shards := range []int32{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			f := startElectedFleet(t, cm.LeaseLostExit, shards, newFakeMember(t, memberOK), nil)
			m := f.m
			f.client.Partition(true)
			select {
			case <-m.Done():
			case <-time.After(3 * elWait):
				t.Fatal("not stopped")
			}
			require.ErrorIs(t, m.Err(), lease.ErrLost)
			f.requireClustersEnded(t)
		})
	}
}

// A disengage and a rotation sent the instant the manager shuts down: the
// shutdown returns within its context, every Context ends, and the
// cluster's controller never runs after Done.
func TestAttackFleetDisengageMeetsShutdown(t *testing.T) {
	for _, what := range []string{"disengage", "rotate"} {
		t.Run(what, func(t *testing.T) {
			_, a, prov, bl, _, mgr, _ := oneMemberOnline(t)
			switch what {
			case "disengage":
				prov.Disengage(t, "a")
			case "rotate":
				require.NoError(t, prov.Engage(t, "a", &rest.Config{Host: a.srv.URL, BearerToken: "token-2"}))
			}
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			mgr.ShutdownAndWait(ctx)
			require.NoError(t, ctx.Err())
			<-mgr.Done()
			for i, c := range bl.of("a") {
				require.Error(t, c.cluster.Context().Err(), "build %d", i)
				require.Equal(t, c.runs.Load(), c.stops.Load(), "build %d runs/stops", i)
			}
		})
	}
}
