package supervise

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/elector"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// shardedElectionHarness is a root of two shards with Reelect, elected by
// e.
func shardedElectionHarness(t *testing.T, e *scriptedElector) *harness {
	return newHarness(t, timing(nil), func(c *Config) {
		c.Elector = e.props()
		c.Identity = "me"
		c.Reelect = true
		c.Shards = 2
		c.FenceTimeout = time.Hour
	})
}

// Where the elector's messages meet a stand-down or a hand-over, in an
// order the elector can make (found by a hostile read for issue 35). The
// scripted elector sends them in that order.

// A shard acquired and then handed back while the replica stands down
// (its last shard lost, a controller slow to shut down). The hand-over
// waited beside the stand-down: the stand-down ended first and resumed the
// start round with the shard still counted held, the stores recovered, and
// then the hand-over let the shard go: Running, no shard held, the stores
// running with a guard that fails every write. The stand-down now carries
// the hand-over out before it resumes the round.
func TestAHandOverDuringAStandDownEndsBeforeTheRoundResumes(t *testing.T) {
	e := &scriptedElector{}
	h := shardedElectionHarness(t, e)
	release := make(chan struct{})
	c0 := testchild.NewController("c0", testchild.Behavior{Shutdown: func(ctx context.Context, n int) {
		if n == 1 {
			<-release
		}
	}})
	store := testchild.NewStore("s", nil)
	started := make(chan error, 1)
	go func() {
		_, err := h.ask(StartManager{Ctx: context.Background(), Children: []childactor.Spec{
			{Name: "s", Kind: actors.KindStore, Impl: store},
			{Name: "c0", Kind: actors.KindController, Impl: c0, Shard: 0},
		}})
		started <- err
	}()
	h.waitFor("electing", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting })
	e.report(t, elector.Acquired{Shard: 0})
	require.NoError(t, <-started)
	h.waitState("c0", supervisor.StateRunning)

	e.report(t, elector.Lost{Shard: 0, Reason: "taken"}) // stand-down: c0 hangs in Shutdown
	h.waitState("s", supervisor.StateStopped)
	e.report(t, elector.Acquired{Shard: 1})  // acquired while standing down
	e.report(t, elector.Releasing{Shard: 1}) // and handed back: waits for c0 too
	h.waitFor("shard 1 held", func(s supervisor.Status) bool { return s.Leader })
	close(release) // c0 returns
	h.waitFor("shard 1 handed over", func(s supervisor.Status) bool { return !s.Shards[1].Held })
	h.waitFor("settled", func(s supervisor.Status) bool {
		st, _ := s.Child("s")
		return s.Phase == supervisor.PhaseRunning || (s.Phase == supervisor.PhaseElecting && st.State == supervisor.StateStopped)
	})
	st := h.status()
	sc, _ := st.Child("s")
	t.Logf("phase=%s leader=%v store=%s recovers=%d", st.Phase, st.Leader, sc.State, func() int { r, _ := store.Counts(); return r }())
	assert.Equal(t, supervisor.PhaseElecting, st.Phase, "no shard held: the replica should wait in Electing")
	assert.NotEqual(t, supervisor.StateRunning, sc.State, "no shard held: the store must not run")

	// A shard won again: the replica runs, the store recovered once more.
	e.report(t, elector.Acquired{Shard: 0})
	h.waitFor("running again", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseRunning })
	h.waitState("s", supervisor.StateRunning)
	h.waitState("c0", supervisor.StateRunning)
}

// A Lost for a shard already handed over (the elector's deadline watcher
// giving it up between the HandedOver and its loop's taking it in): the
// supervisor counted a loss and published ShardLost for a shard it did not
// hold, after ShardReleased for the same shard. It now answers Fenced, so
// that the elector may campaign for it again, and counts nothing.
func TestALostAfterTheHandOverIsNoLoss(t *testing.T) {
	e := &scriptedElector{}
	h := shardedElectionHarness(t, e)
	c0 := testchild.NewController("c0", testchild.Behavior{})
	c1 := testchild.NewController("c1", testchild.Behavior{})
	startTwoShardsAndHandOverOne(t, e, h, c0, c1)
	e.report(t, elector.Lost{Shard: 1, Reason: "not renewed for 10s"})
	require.True(t, testchild.Eventually(wait, func() bool { return e.fenced.Load() == 1 }))
	_, _, released, lost := h.handle.Observed.ShardMoves()
	t.Logf("released=%d lost=%d ShardLost events=%d", released, lost, h.events.count(supervisor.ShardLost, ""))
	assert.Equal(t, int64(0), lost, "shard 1 was not held when Lost came")
	assert.Equal(t, 0, h.events.count(supervisor.ShardLost, ""))
}

// The same during a shutdown: a Lost for a shard handed over before the
// shutdown began. Before, the ending manager counted it (ShardLost, a
// loss in ShardMoves) though nothing ran under it.
func TestALostAfterTheHandOverIsNoLossDuringShutdown(t *testing.T) {
	e := &scriptedElector{}
	h := shardedElectionHarness(t, e)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	c0 := testchild.NewController("c0", testchild.Behavior{Shutdown: func(context.Context, int) { <-release }})
	c1 := testchild.NewController("c1", testchild.Behavior{})
	startTwoShardsAndHandOverOne(t, e, h, c0, c1)

	stopped := make(chan error, 1)
	go func() {
		_, err := h.ask(supervisor.ShutdownManager{Ctx: context.Background()})
		stopped <- err
	}()
	h.waitFor("shutting down", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseShuttingDown })
	e.report(t, elector.Lost{Shard: 1, Reason: "not renewed for 10s"})
	e.report(t, elector.Lost{Shard: 0, Reason: "not renewed for 10s"}) // held: a loss, counted
	h.events.waitCount(t, supervisor.ShardLost, "", 1)
	free()
	<-stopped
	_, _, _, lost := h.handle.Observed.ShardMoves()
	assert.Equal(t, int64(1), lost, "only shard 0 was held when its Lost came")
	assert.Equal(t, 1, h.events.count(supervisor.ShardLost, ""))
}

// startTwoShardsAndHandOverOne starts c0 on shard 0 and c1 on shard 1,
// both shards acquired, then hands shard 1 over (Releasing) and waits for
// its ShardReleased.
func startTwoShardsAndHandOverOne(t *testing.T, e *scriptedElector, h *harness, c0, c1 *testchild.Controller) {
	t.Helper()
	started := make(chan error, 1)
	go func() {
		_, err := h.ask(StartManager{Ctx: context.Background(), Children: []childactor.Spec{
			{Name: "c0", Kind: actors.KindController, Impl: c0, Shard: 0},
			{Name: "c1", Kind: actors.KindController, Impl: c1, Shard: 1},
		}})
		started <- err
	}()
	h.waitFor("electing", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting })
	e.report(t, elector.Acquired{Shard: 0})
	e.report(t, elector.Acquired{Shard: 1})
	require.NoError(t, <-started)
	h.waitState("c1", supervisor.StateRunning)
	e.report(t, elector.Releasing{Shard: 1})
	h.events.waitCount(t, supervisor.ShardReleased, "", 1)
}
