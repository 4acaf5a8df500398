package supervise

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/internal/elector"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// neverElected is an elector that campaigns forever: the manager stays a
// standby, and resigns when asked.
func neverElected() *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(elector.Resign); ok {
			ctx.Send(ctx.Parent(), elector.Released{})
		}
	})
}

func TestAStandbysWebhooksAreSupervised(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) { t.HealthInterval = time.Second; t.UnhealthyThreshold = 2 }),
		func(c *Config) { c.Elector = neverElected() })
	var mu sync.Mutex
	var report func(error)
	wh := testchild.NewWebhook("wh", "/wh", func(ctx context.Context, _ int) error {
		r, _ := actors.FailureReporter(ctx)
		mu.Lock()
		report = r
		mu.Unlock()
		return nil
	}, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	started := make(chan error, 1)
	go func() {
		_, err := h.ask(StartManager{Ctx: context.Background(), Children: []childactor.Spec{
			{Name: "wh", Kind: actors.KindWebhook, Impl: wh}, controllerSpec(c),
		}})
		started <- err
	}()
	h.waitFor("electing", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting })

	// A failure reported by the webhook's background work: restarted.
	mu.Lock()
	r := report
	mu.Unlock()
	r(errBoom)
	h.waitState("wh", supervisor.StateBackingOff)
	h.step(100 * time.Millisecond)
	h.waitState("wh", supervisor.StateRunning)
	starts, _, _ := wh.Counts()
	assert.Equal(t, 2, starts)

	// A webhook that stays not ready is probed and restarted too.
	wh.Shutdown(context.Background()) // makes Ready() false without the supervisor knowing
	h.step(time.Second)
	h.events.waitCount(t, supervisor.ChildUnhealthy, "wh", 1)
	h.settleProbe()
	h.step(time.Second)
	h.events.waitCount(t, supervisor.ChildUnhealthy, "wh", 2)
	h.waitState("wh", supervisor.StateBackingOff)
	assert.ErrorContains(t, h.child("wh").LastError, "webhook not ready")
	h.step(200 * time.Millisecond)
	h.waitState("wh", supervisor.StateRunning)
	assert.True(t, wh.Ready())

	assert.Equal(t, supervisor.PhaseElecting, h.status().Phase)
	assert.Zero(t, runs(c), "no controller runs without the lease")
	_, err := h.ask(supervisor.ShutdownManager{Ctx: context.Background()})
	require.NoError(t, err)
	require.ErrorIs(t, <-started, supervisor.ErrShutdown)
}

// A host stops a standby by cancelling Start's context and then calling
// ShutdownAndWait: whichever reaches the supervisor first, the manager ends
// Stopped with no error (the caller asked to stop).
func TestCancellingAStandbysStartIsARequestedStop(t *testing.T) {
	for i := range 30 {
		h := newHarness(t, timing(nil), func(c *Config) { c.Elector = neverElected() })
		c := testchild.NewController("c", testchild.Behavior{})
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan error, 1)
		go func() {
			_, err := Ask(ctx, h.handle.System, h.handle.PID, h.handle.Observed.Terminated(),
				StartManager{Ctx: ctx, Children: []childactor.Spec{controllerSpec(c)}})
			started <- err
		}()
		h.waitFor("electing", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseElecting })
		cancel()
		if i%2 == 0 { // the other half: ShutdownAndWait right after, racing the cancellation
			require.ErrorIs(t, <-started, context.Canceled)
		}
		if _, err := h.ask(supervisor.ShutdownManager{Ctx: context.Background()}); err != nil {
			require.ErrorIs(t, err, supervisor.ErrStopped, "stopped already by the cancellation")
		}
		<-h.handle.Observed.Done()
		if i%2 == 1 {
			require.Error(t, <-started)
		}
		require.Equal(t, supervisor.PhaseStopped, h.handle.Observed.Phase(), "run %d", i)
		require.NoError(t, h.handle.Observed.Err(), "run %d", i)
	}
}

// Before their first start, controllers have no actor: health reports them
// as not started yet, healthy (waiting for the stores is not a failure).
func TestControllersAreHealthyUntilTheirFirstStart(t *testing.T) {
	h := newHarness(t, timing(nil))
	release := make(chan struct{})
	store := testchild.NewStore("s", func(ctx context.Context, _ int) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	c := testchild.NewController("c", testchild.Behavior{})
	started := make(chan error, 1)
	go func() {
		_, err := h.ask(StartManager{Ctx: context.Background(), Children: []childactor.Spec{
			{Name: "s", Kind: actors.KindStore, Impl: store}, controllerSpec(c),
		}})
		started <- err
	}()
	h.waitFor("recovering", func(s supervisor.Status) bool { return s.Phase == supervisor.PhaseRecovering })
	col := childactor.NewHealthCollector(h.handle.System)
	h.handle.System.Root.Send(h.handle.PID, GatherHealth{Collector: col})
	<-col.Done()
	statuses, ok := col.Close("silent")
	require.True(t, ok)
	assert.Equal(t, []actors.HealthStatus{{Name: "c", Healthy: true, Message: "not started yet"}}, statuses)
	_, _, healthCalls := c.Counts()
	assert.Zero(t, healthCalls)
	close(release)
	require.NoError(t, <-started)
	assert.Equal(t, supervisor.StateRunning, h.child("c").State)
}
