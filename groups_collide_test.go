package controllermanager_test

import (
	"context"
	"time"

	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// alternates fails unless path's start and stop entries alternate: one
// incarnation at a time.
func alternates(t *testing.T, log *gLog, path string) {
	t.Helper()
	last := "stop"
	for _, e := range log.snapshot() {
		what, name, _ := strings.Cut(e, " ")
		if name != path {
			continue
		}
		require.NotEqual(t, last, what, "%s: %s twice in a row: %v", path, what, log.snapshot())
		last = what
	}
}

// A child whose group's restart (or AddChild) has still to start it is
// busy: a RestartChild or StartChild on it meanwhile is refused with
// ErrBusy, rather than start it a second time.
func TestGroupChildRestartedDuringItsGroupsRestartIsBusy(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	store, ctrl := newGStore(log, "g/store"), newGController(log, "g/ctrl")
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, store, ctrl))
	gStart(t, m)
	release := make(chan struct{})
	store.set(func(c *gChild) { c.hangRun = release })
	done := make(chan error, 1)
	go func() { done <- m.RestartChild(gCtx(t), "g") }()
	gEventually(t, "store restarting", func() bool { return log.count("start g/store") == 2 })
	err := m.RestartChild(gCtx(t), "g/ctrl")
	require.ErrorIs(t, err, cm.ErrBusy, "its group's restart has still to start it")
	close(release)
	require.NoError(t, <-done)
	alternates(t, log, "g/ctrl")
	assert.Equal(t, 2, ctrl.runCount(), "started once by the group's restart")
}

func TestGroupChildStartedDuringItsGroupsAddIsBusy(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	gStart(t, m)
	release := make(chan struct{})
	store, ctrl := newGStore(log, "g/store"), newGController(log, "g/ctrl")
	store.set(func(c *gChild) { c.hangRun = release })
	done := make(chan error, 1)
	go func() { done <- m.AddChild(gCtx(t), cm.NewGroup("g", cm.SupervisionSpec{}, store, ctrl)) }()
	gEventually(t, "store starting", func() bool { return log.count("start g/store") == 1 })
	err := m.StartChild(gCtx(t), "g/ctrl")
	require.ErrorIs(t, err, cm.ErrBusy, "its group's AddChild has still to start it")
	close(release)
	require.NoError(t, <-done)
	alternates(t, log, "g/ctrl")
	assert.Equal(t, 1, ctrl.runCount())
}

// RemoveChild of a group whose controller's Shutdown hangs, ignoring its
// context: the call returns with its context's error, the group stays
// (its child Stopping, the name taken) until the Shutdown returns, then
// it is removed; nothing else waits on it.
func TestGroupRemovedWithAHangingShutdown(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	other := newGController(log, "other")
	stuck := newGController(log, "g/stuck")
	m.Add(other, cm.NewGroup("g", cm.SupervisionSpec{}, newGStore(log, "g/store"), stuck))
	gStart(t, m)
	release := make(chan struct{})
	stuck.set(func(c *gChild) { c.hangShutdown = release })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.RemoveChild(ctx, "g"), context.DeadlineExceeded)
	assert.Equal(t, supervisor.StateStopping, gState(t, m, "g/stuck"))
	err := m.AddChild(gCtx(t), cm.NewGroup("g", cm.SupervisionSpec{}))
	require.ErrorIs(t, err, cm.ErrDuplicateChild, "the name stays taken until the group is gone")
	require.NoError(t, m.RestartChild(gCtx(t), "other"), "the rest of the manager is not held up")

	close(release)
	gEventually(t, "g removed once its Shutdown returned", func() bool {
		_, ok := mustStatus(t, m).Child("g")
		return !ok
	})
	assert.Equal(t, 1, log.count("stop g/store"))
}

// Inside a stopped group nothing starts but the group: RestartChild or
// StartChild of a child in it is refused, naming the group; StartChild of
// the group starts it again.
func TestChildOfAStoppedGroupDoesNotStart(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	ctrl := newGController(log, "g/inner/ctrl")
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, cm.NewGroup("inner", cm.SupervisionSpec{}, ctrl)))
	gStart(t, m)
	require.NoError(t, m.StopChild(gCtx(t), "g"))
	for _, call := range []func(context.Context, string) error{m.RestartChild, m.StartChild} {
		err := call(gCtx(t), "g/inner/ctrl")
		require.Error(t, err)
		assert.Contains(t, err.Error(), `group "g" is stopped`)
		err = call(gCtx(t), "g/inner")
		require.Error(t, err)
		assert.Contains(t, err.Error(), `group "g" is stopped`)
	}
	assert.Equal(t, 1, ctrl.runCount(), "nothing ran")
	require.NoError(t, m.StartChild(gCtx(t), "g"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "g/inner/ctrl"))
	assert.Equal(t, 2, ctrl.runCount())
}

// A group restarted whole by its parent starts its children in order;
// when one of them fails to start inside a nested group (whose own
// budget is far from spent), that failure is the nested group's, and the
// other children still start: they are not held back behind its loop
// (state-space seed 1796182979809450821).
func TestGroupRestartGoesOnPastANestedFailure(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, &cm.SupervisionSpec{InitialBackoff: gDuration(20 * time.Millisecond), MaxBackoff: gDuration(20 * time.Millisecond)})
	store, ctrl := newGStore(log, "g1/g3/store"), newGController(log, "g1/ctrl")
	m.Add(cm.NewGroup("g1", cm.SupervisionSpec{MaxRestarts: 1},
		cm.NewGroup("g3", cm.SupervisionSpec{MaxRestarts: 1000}, store), ctrl))
	gStart(t, m)
	ctrl.set(func(c *gChild) { c.failFrom, c.failTo = 2, 2 }) // its restart fails once: g1's budget spent
	store.set(func(c *gChild) { c.failFrom, c.failTo = 2, 1<<30 })
	ctrl.fail()
	gEventually(t, "g1/ctrl running again after g1's restart", func() bool {
		return ctrl.runCount() >= 3 && gState(t, m, "g1/ctrl") == supervisor.StateRunning
	})
	assert.Greater(t, store.runCount(), 1, "the store's restart failed, and g3 keeps restarting it")
	store.set(func(c *gChild) { c.failFrom = 0 })
	gEventually(t, "the store recovers", func() bool { return gState(t, m, "g1/g3/store") == supervisor.StateRunning })
}

// The same with the failing child and its sibling in one OneForOne group:
// the root restarting the group whole starts the sibling even while the
// first child's starts keep failing (state-space seed
// 1796183720818316512: the sibling waited behind its loop for good).
func TestGroupRestartStartsTheSiblingsOfAFailingChild(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, &cm.SupervisionSpec{InitialBackoff: gDuration(20 * time.Millisecond), MaxBackoff: gDuration(20 * time.Millisecond), MaxRestarts: 1000})
	a, b := newGController(log, "g1/a"), newGController(log, "g1/b")
	m.Add(cm.NewGroup("g1", cm.SupervisionSpec{MaxRestarts: 1}, a, b))
	gStart(t, m)
	a.set(func(c *gChild) { c.failFrom, c.failTo = 2, 1<<30 })
	b.fail() // b is in a restart of its own when g1 restarts whole
	a.fail()
	gEventually(t, "g1 restarted whole, b running again", func() bool {
		cs, _ := mustStatus(t, m).Child("g1")
		return cs.Restarts >= 1 && b.runCount() >= 3 && gState(t, m, "g1/b") == supervisor.StateRunning
	})
	a.set(func(c *gChild) { c.failFrom = 0 })
}
