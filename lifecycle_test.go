package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/supervisor"
)

// steerer is what both managers offer to steer one child.
type steerer interface {
	RestartChild(ctx context.Context, name string) error
	StopChild(ctx context.Context, name string) error
	StartChild(ctx context.Context, name string) error
}

var (
	_ steerer = (*cm.ControllerManager)(nil)
	_ steerer = (*cm.WebhookManager)(nil)
)

// lifecycleCall is one of the typed lifecycle calls, for the tables below.
type lifecycleCall struct {
	name string
	call func(m steerer, ctx context.Context, child string) error
}

var lifecycleCalls = []lifecycleCall{
	{"RestartChild", func(m steerer, ctx context.Context, child string) error {
		return m.RestartChild(ctx, child)
	}},
	{"StopChild", func(m steerer, ctx context.Context, child string) error {
		return m.StopChild(ctx, child)
	}},
	{"StartChild", func(m steerer, ctx context.Context, child string) error {
		return m.StartChild(ctx, child)
	}},
}

func childState(t *testing.T, m interface {
	Status(context.Context) (cm.Status, error)
}, name string) cm.ChildState {
	t.Helper()
	cs, ok := mustStatus(t, m).Child(name)
	require.True(t, ok, "child %q in Status", name)
	return cs.State
}

func TestTypedLifecycleCallsOnARunningControllerManager(t *testing.T) {
	m := newManager(t, nil, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	m.Add(c)
	events := record(m)
	ctx := context.Background()
	require.NoError(t, m.Start(ctx, 0))

	require.NoError(t, m.RestartChild(ctx, "c"))
	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 2, runs, "a restart is a new Run call")
	assert.Equal(t, 1, shutdowns, "after a Shutdown")
	assert.Equal(t, cm.StateRunning, childState(t, m, "c"))
	require.True(t, testchild.Eventually(wait, func() bool { return events.count(cm.ChildRestarted, "c") == 1 }),
		"one ChildRestarted event")

	require.NoError(t, m.StopChild(ctx, "c"))
	_, shutdowns, _ = c.Counts()
	assert.Equal(t, 2, shutdowns, "StopChild returns once Shutdown has returned")
	assert.Equal(t, cm.StateStopped, childState(t, m, "c"))
	require.True(t, testchild.Eventually(wait, func() bool { return events.count(cm.ChildStopped, "c") == 2 }),
		"a ChildStopped event for the restart's Shutdown and one for StopChild's")

	require.NoError(t, m.StartChild(ctx, "c"))
	runs, _, _ = c.Counts()
	assert.Equal(t, 3, runs, "StartChild runs the stopped controller again")
	assert.Equal(t, cm.StateRunning, childState(t, m, "c"))

	err := m.StartChild(ctx, "c")
	assert.ErrorIs(t, err, cm.ErrAlreadyRunning)
	assert.ErrorIs(t, err, supervisor.ErrAlreadyRunning)
}

func TestTypedLifecycleCallsOnARunningWebhookManager(t *testing.T) {
	m := cm.NewWebhookManager(cm.NewContext(nil), quiet)
	t.Cleanup(func() { m.ShutdownAndWait(context.Background()) })
	w := testchild.NewWebhook("w", "/w", nil, nil)
	m.Add(w)
	events := record(m)
	ctx := context.Background()
	require.NoError(t, m.Start(ctx))

	require.NoError(t, m.RestartChild(ctx, "w"))
	starts, shutdowns, _ := w.Counts()
	assert.Equal(t, 2, starts)
	assert.Equal(t, 1, shutdowns)
	require.True(t, testchild.Eventually(wait, func() bool { return events.count(cm.ChildRestarted, "w") == 1 }))

	require.NoError(t, m.StopChild(ctx, "w"))
	assert.Equal(t, cm.StateStopped, childState(t, m, "w"))
	assert.False(t, w.Ready())

	require.NoError(t, m.StartChild(ctx, "w"))
	starts, _, _ = w.Counts()
	assert.Equal(t, 3, starts)
	assert.Equal(t, cm.StateRunning, childState(t, m, "w"))
}

func TestTypedLifecycleCallsOfAnUnknownChild(t *testing.T) {
	m := newManager(t, nil, nil)
	m.Add(testchild.NewController("c", testchild.Behavior{}))
	ctx := context.Background()
	require.NoError(t, m.Start(ctx, 0))
	for _, tt := range lifecycleCalls {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(m, ctx, "nope")
			require.Error(t, err)
			assert.ErrorIs(t, err, cm.ErrUnknownChild, "the root's sentinel")
			assert.ErrorIs(t, err, supervisor.ErrUnknownChild, "the same value as supervisor's")
			assert.Contains(t, err.Error(), `"nope"`)
		})
	}
	assert.Equal(t, cm.StateRunning, childState(t, m, "c"), "the other children are untouched")
}

func TestTypedLifecycleCallsWithAnEndedContext(t *testing.T) {
	m := newManager(t, nil, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	m.Add(c)
	require.NoError(t, m.Start(context.Background(), 0))
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range lifecycleCalls {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(m, ended, "c")
			assert.ErrorIs(t, err, context.Canceled)
			assert.Contains(t, err.Error(), `"c"`)
		})
	}
	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 1, runs, "an ended context asks nothing")
	assert.Equal(t, 0, shutdowns)
	assert.Equal(t, cm.StateRunning, childState(t, m, "c"))
}

// A RestartChild whose Shutdown hangs waits for it: the new incarnation
// never runs beside the old one. The caller's ctx ending returns its error
// at once; the restart then goes on alone, the child Stopping (busy) until
// the Shutdown returns, then running again.
func TestRestartChildWhoseShutdownHangs(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	c := testchild.NewController("stuck", testchild.Behavior{Shutdown: func(_ context.Context, n int) {
		if n == 1 {
			close(entered)
			<-release // ignores its context, as a hung Shutdown does
		}
	}})
	m := newManager(t, nil, nil)
	m.Add(c)
	events := record(m)
	require.NoError(t, m.Start(context.Background(), 0))

	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- m.RestartChild(ctx, "stuck") }()
	<-entered
	select {
	case err := <-returned:
		t.Fatalf("RestartChild returned while Shutdown hung: %v", err)
	default:
	}
	cancel()
	err := <-returned
	assert.ErrorIs(t, err, context.Canceled)
	runs, _, _ := c.Counts()
	assert.Equal(t, 1, runs, "no new Run while the old Shutdown runs")
	assert.Equal(t, cm.StateStopping, childState(t, m, "stuck"))

	err = m.RestartChild(context.Background(), "stuck")
	assert.ErrorIs(t, err, cm.ErrBusy, "a second restart meets the first")
	assert.ErrorIs(t, err, supervisor.ErrBusy)

	close(release)
	require.True(t, testchild.Eventually(wait, func() bool {
		runs, _, _ := c.Counts()
		return runs == 2 && childState(t, m, "stuck") == cm.StateRunning
	}), "the restart goes on once Shutdown returns")
	require.True(t, testchild.Eventually(wait, func() bool {
		return events.count(cm.ChildStopped, "stuck") == 1 && events.count(cm.ChildRestarted, "stuck") == 1
	}))
}

// RestartChild, StopChild and StartChild steer one child of a running
// manager and return once it has taken effect; an unknown name is an error
// that errors.Is matches with ErrUnknownChild.
func ExampleControllerManager_RestartChild() {
	mgr, _ := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	mgr.Add(&jobController{})
	ctx := context.Background()
	_ = mgr.Start(ctx, 0)
	defer mgr.ShutdownAndWait(ctx)

	state := func() cm.ChildState {
		st, _ := mgr.Status(ctx)
		jobs, _ := st.Child("jobs")
		return jobs.State
	}
	if err := mgr.RestartChild(ctx, "jobs"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("restarted:", state())
	if err := mgr.StopChild(ctx, "jobs"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("stopped:", state())
	if err := mgr.StartChild(ctx, "jobs"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("started:", state())

	err := mgr.RestartChild(ctx, "nope")
	fmt.Println(errors.Is(err, cm.ErrUnknownChild), err)
	// Output:
	// restarted: Running
	// stopped: Stopped
	// started: Running
	// true restart: supervisor: unknown child "nope"
}

// Each sentinel the root re-exports is the value it names, so that
// errors.Is agrees whichever package a caller matches with.
func TestRootSentinelsAreTheValuesTheyName(t *testing.T) {
	for _, tt := range []struct {
		name       string
		root, have error
	}{
		{"ErrUnknownChild", cm.ErrUnknownChild, supervisor.ErrUnknownChild},
		{"ErrBusy", cm.ErrBusy, supervisor.ErrBusy},
		{"ErrNotRunning", cm.ErrNotRunning, supervisor.ErrNotRunning},
		{"ErrStopped", cm.ErrStopped, supervisor.ErrStopped},
		{"ErrAlreadyRunning", cm.ErrAlreadyRunning, supervisor.ErrAlreadyRunning},
		{"ErrNothingToStart", cm.ErrNothingToStart, supervisor.ErrNothingToStart},
		{"ErrDuplicateChild", cm.ErrDuplicateChild, supervisor.ErrDuplicateChild},
		{"ErrShardNotHeld", cm.ErrShardNotHeld, supervisor.ErrShardNotHeld},
		{"ErrShutdown", cm.ErrShutdown, supervisor.ErrShutdown},
		{"ErrStartTwice", cm.ErrStartTwice, supervisor.ErrStartTwice},
		{"ErrUnhealthy", cm.ErrUnhealthy, supervisor.ErrUnhealthy},
		{"ErrReported", cm.ErrReported, actors.ErrReported},
		{"ErrLeaseLost", cm.ErrLeaseLost, lease.ErrLost},
		{"ErrLeaseNotHeld", cm.ErrLeaseNotHeld, lease.ErrNotHeld},
		{"ErrLeaseRenewalOverdue", cm.ErrLeaseRenewalOverdue, lease.ErrRenewalOverdue},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("wrapped: %w", tt.have)
			assert.ErrorIs(t, wrapped, tt.root)
			assert.ErrorIs(t, fmt.Errorf("wrapped: %w", tt.root), tt.have)
		})
	}
}

// The lifecycle errors a caller meets through the typed calls match the
// root's sentinels: a plain runnable has nothing to restart, a manager not
// started yet or stopped takes no call.
func TestTypedLifecycleCallErrorsMatchTheRootSentinels(t *testing.T) {
	m := newManager(t, nil, nil)
	m.Add(testchild.NewRunnable(nil), testchild.NewController("c", testchild.Behavior{}))
	ctx := context.Background()
	assert.ErrorIs(t, m.RestartChild(ctx, "c"), cm.ErrNotRunning, "before Start")
	require.NoError(t, m.Start(ctx, 0))
	st := mustStatus(t, m)
	var plain string
	for _, c := range st.Children {
		if c.Name != "c" {
			plain = c.Name
		}
	}
	require.NotEmpty(t, plain)
	assert.ErrorIs(t, m.RestartChild(ctx, plain), cm.ErrNothingToStart)
	m.ShutdownAndWait(ctx)
	for _, tt := range lifecycleCalls {
		assert.ErrorIs(t, tt.call(m, ctx, "c"), cm.ErrStopped, tt.name)
	}
}
