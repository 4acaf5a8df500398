package supervise

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

func TestLifecycleMessages(t *testing.T) {
	h := newHarness(t, timing(nil))
	a := testchild.NewController("a", testchild.Behavior{})
	b := testchild.NewController("b", testchild.Behavior{})
	plain := testchild.NewRunnable(nil)
	h.start(controllerSpec(a), controllerSpec(b), childactor.Spec{Name: "plain", Kind: actors.KindRunnable, Impl: plain})

	// StopChild: stopped, not a failure, not restarted, and a report from
	// its stopped incarnation is ignored.
	_, err := h.ask(supervisor.StopChild{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, 1, shutdowns(a))
	a.Fail(errBoom)
	h.step(time.Hour)
	ca := h.child("a")
	assert.Equal(t, supervisor.StateStopped, ca.State)
	assert.Zero(t, ca.Failures)
	assert.Zero(t, h.events.count(supervisor.ChildFailed, ""))
	_, err = h.ask(supervisor.StopChild{Name: "a"})
	require.NoError(t, err, "stopping a stopped child is a no-op")
	assert.Equal(t, 1, shutdowns(a))

	// StartChild brings it back.
	_, err = h.ask(supervisor.StartChild{Name: "a"})
	require.NoError(t, err)
	assert.Equal(t, supervisor.StateRunning, h.child("a").State)
	assert.Equal(t, 2, runs(a))
	_, err = h.ask(supervisor.StartChild{Name: "a"})
	assert.ErrorContains(t, err, "already running")
	assert.ErrorIs(t, err, supervisor.ErrAlreadyRunning)

	// RestartChild: Shutdown then Run, counted, without spending budget.
	for range 10 {
		_, err = h.ask(supervisor.RestartChild{Name: "b"})
		require.NoError(t, err)
	}
	cb := h.child("b")
	assert.Equal(t, 10, cb.Restarts)
	assert.Equal(t, supervisor.StateRunning, cb.State)
	assert.Equal(t, 11, runs(b))
	assert.Equal(t, 10, shutdowns(b))
	assert.Equal(t, supervisor.PhaseRunning, h.status().Phase)

	// Unknown names and what cannot be done are error replies.
	for _, msg := range []any{supervisor.RestartChild{Name: "x"}, supervisor.StopChild{Name: "x"}, supervisor.StartChild{Name: "x"}, supervisor.RemoveChild{Name: "x"}} {
		_, err := h.ask(msg)
		assert.ErrorIs(t, err, supervisor.ErrUnknownChild, "%T", msg)
		assert.ErrorContains(t, err, `"x"`)
	}
	_, err = h.ask(supervisor.RestartChild{Name: "plain"})
	assert.ErrorContains(t, err, "nothing to start")
	assert.ErrorIs(t, err, supervisor.ErrNothingToStart)

	// A request of a type it does not handle is answered, not left waiting.
	_, err = h.ask(&supervisor.GetStatus{})
	assert.ErrorIs(t, err, supervisor.ErrUnknownMessage)
	assert.ErrorContains(t, err, "*supervisor.GetStatus")
}

func TestAddAndRemoveChildWhileRunning(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) { t.InitialBackoff = time.Millisecond }))
	a := testchild.NewController("a", testchild.Behavior{})
	h.start(controllerSpec(a))

	added := testchild.NewController("added", testchild.Behavior{})
	_, err := h.ask(supervisor.AddChild{Runnable: added})
	require.NoError(t, err)
	assert.Equal(t, supervisor.StateRunning, h.child("added").State)
	assert.Equal(t, 1, runs(added))

	// It is supervised like the others.
	added.Fail(errBoom)
	h.waitState("added", supervisor.StateBackingOff)
	h.step(time.Millisecond)
	h.waitState("added", supervisor.StateRunning)
	assert.Equal(t, 1, h.child("added").Restarts)

	_, err = h.ask(supervisor.AddChild{Runnable: testchild.NewController("added", testchild.Behavior{})})
	assert.ErrorContains(t, err, `a child named "added" already exists`)
	assert.ErrorIs(t, err, supervisor.ErrDuplicateChild)
	_, err = h.ask(supervisor.AddChild{Name: "named", Runnable: testchild.NewRunnable(nil)})
	require.NoError(t, err)
	_, err = h.ask(supervisor.AddChild{Runnable: testchild.NewRunnable(nil)})
	assert.ErrorContains(t, err, "no name")
	_, err = h.ask(supervisor.AddChild{Runnable: 42})
	assert.ErrorContains(t, err, "int is neither")
	failing := testchild.NewController("failing", testchild.Behavior{Run: func(context.Context, int) error { return errBoom }})
	_, err = h.ask(supervisor.AddChild{Runnable: failing})
	assert.ErrorIs(t, err, errBoom, "AddChild answers the start's error")

	_, err = h.ask(supervisor.RemoveChild{Name: "added"})
	require.NoError(t, err)
	_, ok := h.status().Child("added")
	assert.False(t, ok, "a removed child is gone from status")
	assert.Equal(t, 2, shutdowns(added))
	h.events.waitCount(t, supervisor.ChildRemoved, "added", 1)

	col := childactor.NewHealthCollector(h.handle.System)
	h.handle.System.Root.Send(h.handle.PID, GatherHealth{Collector: col})
	<-col.Done()
	statuses, _ := col.Close("silent")
	for _, s := range statuses {
		assert.NotEqual(t, "added", s.Name, "a removed child is gone from health")
	}
}

func TestLifecycleMessagesOutsideRunning(t *testing.T) {
	h := newHarness(t, timing(nil))
	_, err := h.ask(supervisor.RestartChild{Name: "a"})
	assert.ErrorIs(t, err, supervisor.ErrNotRunning)
	_, err = h.ask(supervisor.AddChild{Runnable: testchild.NewController("x", testchild.Behavior{})})
	assert.ErrorIs(t, err, supervisor.ErrNotRunning)

	_, err = h.ask(supervisor.ShutdownManager{Ctx: context.Background()})
	require.NoError(t, err)
	<-h.handle.Observed.Terminated()
	_, err = h.ask(supervisor.StopChild{Name: "a"})
	assert.ErrorIs(t, err, supervisor.ErrStopped, "after the manager has stopped")
}

func TestShutdownSupersedesARestartInProgress(t *testing.T) {
	h := newHarness(t, timing(nil))
	a := testchild.NewController("a", testchild.Behavior{})
	h.start(controllerSpec(a))
	a.Fail(errBoom)
	h.waitState("a", supervisor.StateBackingOff)
	_, err := h.ask(supervisor.ShutdownManager{Ctx: context.Background()})
	require.NoError(t, err)
	assert.Equal(t, supervisor.PhaseStopped, h.handle.Observed.Phase())
	assert.NoError(t, h.handle.Observed.Err())
	h.clock.Step(time.Hour) // the backoff timer was cancelled: nothing starts
	assert.Equal(t, 1, runs(a))
	assert.Equal(t, 1, shutdowns(a))
}

func TestStuckShutdownDuringARestartEscalates(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newHarness(t, timing(func(t *Timing) { t.ShutdownTimeout = 5 * time.Second }))
	a := testchild.NewController("a", testchild.Behavior{Shutdown: func(_ context.Context, n int) {
		if n == 1 {
			<-release
		}
	}})
	h.start(controllerSpec(a))
	a.Fail(errBoom)
	h.waitState("a", supervisor.StateStopping)
	h.step(5 * time.Second)
	h.events.waitCount(t, supervisor.Escalated, "a", 1)
	var esc *supervisor.EscalationError
	require.True(t, errors.As(lastEvent(h, supervisor.Escalated).Err, &esc))
	assert.Contains(t, esc.Error(), "Shutdown did not return within 5s")
	assert.Equal(t, 1, runs(a), "never two incarnations at once")
}

func lastEvent(h *harness, typ supervisor.EventType) supervisor.Event {
	var last supervisor.Event
	for _, e := range h.events.all() {
		if e.Type == typ {
			last = e
		}
	}
	return last
}
