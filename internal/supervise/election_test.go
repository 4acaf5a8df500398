package supervise

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/actorkube/controllermanager/internal/elector"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// scriptedElector is an elector actor whose reports the test sends: it
// records how often it was spawned and stopped, and answers Resign with
// Released as both electors do.
type scriptedElector struct {
	spawned, stopped atomic.Int32
	fenced           atomic.Int32 // Fenced answers received
	mu               sync.Mutex
	parent           *actor.PID
	system           *actor.ActorSystem
}

func (e *scriptedElector) props() *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			e.mu.Lock()
			e.parent, e.system = ctx.Parent(), ctx.ActorSystem()
			e.mu.Unlock()
			e.spawned.Add(1)
		case *actor.Stopping:
			e.stopped.Add(1)
		case elector.Resign:
			ctx.Send(ctx.Parent(), elector.Released{})
		case elector.Fenced:
			e.fenced.Add(1)
		}
	})
}

// report sends msg to the supervisor as the elector last spawned.
func (e *scriptedElector) report(t *testing.T, msg any) {
	t.Helper()
	require.True(t, testchild.Eventually(wait, func() bool { return e.spawned.Load() > 0 }), "no elector spawned")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.system.Root.Send(e.parent, msg)
}

func electionHarness(t *testing.T, e *scriptedElector) *harness {
	return newHarness(t, timing(nil), func(c *Config) {
		c.Elector = e.props()
		c.Identity = "me"
		c.Reelect = true
	})
}

// With one lease the elector's shard messages drive the election, shard 0
// being the lease: a loss fences, campaigns again once the elector is answered Fenced, once the
// controllers have stopped, and leaves the elector running.
func TestTheSingleLeaseIsShardZero(t *testing.T) {
	e := &scriptedElector{}
	h := electionHarness(t, e)
	c := testchild.NewController("c", testchild.Behavior{})
	started := make(chan error, 1)
	go func() {
		_, err := h.ask(StartManager{Ctx: context.Background(), Children: []childactor.Spec{controllerSpec(c)}})
		started <- err
	}()
	h.waitFor("electing", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting })

	e.report(t, elector.Acquired{Shard: 0})
	require.NoError(t, <-started)
	st := h.status()
	assert.Equal(t, supervisor.PhaseRunning, st.Phase)
	assert.True(t, st.Leader)
	assert.Equal(t, "me", st.LeaderIdentity)
	assert.Empty(t, st.Shards, "one lease has no shards to report")
	h.events.waitCount(t, supervisor.LeaderElected, "", 1)

	e.report(t, elector.Lost{Shard: 0, Reason: "taken by r2"})
	h.waitFor("stood down", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting && !s.Leader })
	h.waitState("c", supervisor.StateStopped)
	require.True(t, testchild.Eventually(wait, func() bool { return e.fenced.Load() == 1 }), "Fenced answered once the controller stopped")
	e.report(t, elector.HolderChanged{Shard: 0, Identity: "r2"})
	h.waitFor("the new holder", func(s supervisor.Status) bool { return s.LeaderIdentity == "r2" })
	h.events.waitCount(t, supervisor.LeaderLost, "", 1)
	assert.Equal(t, int32(1), e.spawned.Load(), "the elector runs on across a loss")
	assert.Equal(t, int32(0), e.stopped.Load())

	e.report(t, elector.Acquired{Shard: 0})
	h.waitState("c", supervisor.StateRunning)
	assert.Equal(t, 2, runs(c), "elected again: the controller runs afresh")
	assert.Equal(t, int32(1), e.fenced.Load())
	assert.Equal(t, 0, h.events.count(supervisor.ShardAcquired, "")+h.events.count(supervisor.ShardLost, ""), "one lease publishes leader events only")
}
