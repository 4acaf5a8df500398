package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

var errBoom = errors.New("boom")

func timing(mod func(*Timing)) Timing {
	t := DefaultTiming()
	if mod != nil {
		mod(&t)
	}
	return t
}

func TestOneForOneRestartsOnlyTheFailedChildAfterBackoff(t *testing.T) {
	h := newHarness(t, timing(nil))
	a := testchild.NewController("a", testchild.Behavior{})
	b := testchild.NewController("b", testchild.Behavior{})
	h.start(controllerSpec(a), controllerSpec(b))

	a.Fail(errBoom)
	h.waitState("a", supervisor.StateBackingOff)
	assert.Equal(t, 1, shutdowns(a), "the failed child is shut down at once")
	assert.Equal(t, 1, runs(a), "and waits for its backoff")

	h.step(99 * time.Millisecond)
	assert.Equal(t, supervisor.StateBackingOff, h.child("a").State)
	h.step(time.Millisecond)
	h.waitState("a", supervisor.StateRunning)
	assert.Equal(t, 2, runs(a))
	assert.Equal(t, 1, runs(b), "OneForOne leaves the others alone")
	assert.Equal(t, 0, shutdowns(b))

	ca := h.child("a")
	assert.Equal(t, 1, ca.Restarts)
	assert.Equal(t, 1, ca.Failures)
	assert.ErrorIs(t, ca.LastError, errBoom)
	assert.Contains(t, ca.LastError.Error(), `controller "a": failure reported by its background work`)
	h.events.waitCount(t, supervisor.ChildFailed, "a", 1)
	h.events.waitCount(t, supervisor.ChildRestarted, "a", 1)
	assert.Equal(t, 1, h.events.count(supervisor.ChildFailed, "a"))
}

func TestBackoffDoublesIsCappedAndResets(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) {
		t.InitialBackoff = 100 * time.Millisecond
		t.MaxBackoff = 350 * time.Millisecond
	}), withPolicy(func(p *Policy) {
		p.MaxRestarts = 100
		p.RestartWindow = 10 * time.Second
	}))
	a := testchild.NewController("a", testchild.Behavior{})
	h.start(controllerSpec(a))

	for i, want := range []time.Duration{100, 200, 350, 350} {
		want *= time.Millisecond
		a.Fail(errBoom)
		h.waitState("a", supervisor.StateBackingOff)
		h.step(want - time.Millisecond)
		require.Equal(t, supervisor.StateBackingOff, h.child("a").State, "failure %d: restarted before %s", i+1, want)
		h.step(time.Millisecond)
		h.waitState("a", supervisor.StateRunning)
	}
	// Having run for the RestartWindow, the child starts over at InitialBackoff.
	h.step(10 * time.Second)
	a.Fail(errBoom)
	h.waitState("a", supervisor.StateBackingOff)
	h.step(100 * time.Millisecond)
	h.waitState("a", supervisor.StateRunning)
	assert.Equal(t, 6, runs(a))
}

func TestBackoffJitterStaysWithinTwentyPercentBelow(t *testing.T) {
	s := &root{cfg: Config{Policy: DefaultPolicy(), Timing: timing(nil), Jitter: func() float64 { return 0.999 }}}
	lvl := &level{s: s, policy: s.cfg.Policy, initialBackoff: s.cfg.Timing.InitialBackoff, maxBackoff: s.cfg.Timing.MaxBackoff}
	rec := &childRecord{lvl: lvl}
	d := lvl.backoff(rec, time.Now())
	assert.Greater(t, d, 80*time.Millisecond)
	assert.LessOrEqual(t, d, 100*time.Millisecond)
	lvl.initialBackoff = time.Hour // overflowing shifts stay at the cap
	rec.hist().backoffStep = 70
	assert.LessOrEqual(t, lvl.backoff(rec, time.Now()), s.cfg.Timing.MaxBackoff)
}

func TestRestartBudgetEscalates(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) {
		t.InitialBackoff = time.Millisecond
		t.MaxBackoff = time.Millisecond
	}), withPolicy(func(p *Policy) {
		p.MaxRestarts = 2
		p.RestartWindow = time.Minute
	}))
	a := testchild.NewController("a", testchild.Behavior{})
	b := testchild.NewController("b", testchild.Behavior{})
	h.start(controllerSpec(a), controllerSpec(b))

	for i := range 2 {
		a.Fail(fmt.Errorf("failure %d", i))
		h.waitState("a", supervisor.StateBackingOff)
		h.step(time.Millisecond)
		h.waitState("a", supervisor.StateRunning)
	}
	a.Fail(errors.New("the last straw"))
	select {
	case <-h.handle.Observed.Done():
	case <-time.After(wait):
		t.Fatal("the manager did not stop after the escalation")
	}
	err := h.handle.Observed.Err()
	var esc *supervisor.EscalationError
	require.ErrorAs(t, err, &esc)
	assert.Equal(t, "a", esc.Child)
	assert.Equal(t, actors.KindController, esc.Kind)
	assert.Contains(t, err.Error(), "the last straw")
	assert.Contains(t, err.Error(), `controller "a" failed 3 times within 1m0s`)
	assert.Equal(t, supervisor.PhaseFailed, h.handle.Observed.Phase())
	h.events.waitCount(t, supervisor.Escalated, "a", 1)
	assert.Equal(t, 3, shutdowns(a))
	assert.Equal(t, 1, shutdowns(b), "escalation shuts everything down")
}

func TestRestartBudgetForgetsOldRestarts(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) { t.InitialBackoff = time.Millisecond }), withPolicy(func(p *Policy) {
		p.MaxRestarts = 1
		p.RestartWindow = time.Second
	}))
	a := testchild.NewController("a", testchild.Behavior{})
	h.start(controllerSpec(a))
	for range 3 { // one restart per window is within budget, forever
		a.Fail(errBoom)
		h.waitState("a", supervisor.StateBackingOff)
		h.step(time.Millisecond)
		h.waitState("a", supervisor.StateRunning)
		h.step(time.Second)
	}
	assert.Equal(t, supervisor.PhaseRunning, h.status().Phase)
	assert.Equal(t, 3, h.child("a").Restarts)
}

func TestStrategies(t *testing.T) {
	tests := []struct {
		strategy  supervisor.Strategy
		wantRuns  []int // per child a, b, c after b fails
		wantOrder []string
	}{
		{supervisor.OneForOne, []int{1, 2, 1}, []string{"b"}},
		{supervisor.AllForOne, []int{2, 2, 2}, []string{"a", "b", "c"}},
		{supervisor.RestForOne, []int{1, 2, 2}, []string{"b", "c"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.strategy), func(t *testing.T) {
			h := newHarness(t, timing(nil), withPolicy(func(p *Policy) { p.Strategy = tt.strategy }))
			var mu sync.Mutex
			var order []string
			ctrls := map[string]*testchild.Controller{}
			var specs []childactor.Spec
			for _, name := range []string{"a", "b", "c"} {
				c := testchild.NewController(name, testchild.Behavior{Run: func(_ context.Context, n int) error {
					if n > 1 {
						mu.Lock()
						order = append(order, name)
						mu.Unlock()
					}
					return nil
				}})
				ctrls[name] = c
				specs = append(specs, controllerSpec(c))
			}
			// A store never restarts with its siblings.
			store := testchild.NewStore("s", nil)
			specs = append(specs, childactor.Spec{Name: "s", Kind: actors.KindStore, Impl: store})
			h.start(specs...)

			ctrls["b"].Fail(errBoom)
			h.waitState("b", supervisor.StateBackingOff)
			h.step(100 * time.Millisecond)
			h.waitFor("all running", func(s supervisor.Status) bool {
				for _, c := range s.Children {
					if c.State != supervisor.StateRunning {
						return false
					}
				}
				return true
			})
			for i, name := range []string{"a", "b", "c"} {
				assert.Equal(t, tt.wantRuns[i], runs(ctrls[name]), name)
				assert.Equal(t, tt.wantRuns[i]-1, shutdowns(ctrls[name]), name)
				assert.Equal(t, tt.wantRuns[i]-1, h.child(name).Restarts, name)
			}
			mu.Lock()
			assert.Equal(t, tt.wantOrder, order, "restarts run in the order children were added")
			mu.Unlock()
			recovers, _ := store.Counts()
			assert.Equal(t, 1, recovers)
			h.events.waitCount(t, supervisor.ChildFailed, "b", 1)
			assert.Equal(t, 1, h.events.count(supervisor.ChildFailed, ""), "only b failed")
		})
	}
}

func TestFailedRestartIsAFailureToo(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) { t.InitialBackoff = 10 * time.Millisecond; t.MaxBackoff = time.Second }))
	a := testchild.NewController("a", testchild.Behavior{Run: func(_ context.Context, n int) error {
		if n == 2 {
			return errors.New("cannot reconnect")
		}
		if n == 3 {
			panic("still broken")
		}
		return nil
	}})
	h.start(controllerSpec(a))
	a.Fail(errBoom)
	h.waitState("a", supervisor.StateBackingOff)
	h.step(10 * time.Millisecond) // run 2 fails: backoff 20ms
	h.events.waitCount(t, supervisor.ChildFailed, "a", 2)
	h.waitState("a", supervisor.StateBackingOff)
	h.step(20 * time.Millisecond) // run 3 panics: backoff 40ms
	h.events.waitCount(t, supervisor.ChildFailed, "a", 3)
	h.waitState("a", supervisor.StateBackingOff)
	h.step(40 * time.Millisecond)
	h.waitState("a", supervisor.StateRunning)
	assert.Equal(t, 4, runs(a))
	assert.Equal(t, 3, shutdowns(a), "a failed Run is still followed by its Shutdown")
	var pe *actors.PanicError
	require.ErrorAs(t, h.child("a").LastError, &pe)
	assert.Equal(t, "Run", pe.Op)
}

func TestReportsOfAnOldIncarnationAreIgnored(t *testing.T) {
	h := newHarness(t, timing(nil))
	var reporters []func(error)
	var mu sync.Mutex
	a := testchild.NewController("a", testchild.Behavior{Run: func(ctx context.Context, _ int) error {
		report, ok := actors.FailureReporter(ctx)
		require.True(t, ok)
		mu.Lock()
		reporters = append(reporters, report)
		mu.Unlock()
		return nil
	}})
	h.start(controllerSpec(a))
	_, err := h.ask(supervisor.RestartChild{Name: "a"})
	require.NoError(t, err)
	mu.Lock()
	old := reporters[0]
	mu.Unlock()
	old(errBoom)
	old(errBoom)
	h.status() // the reports are handled before this answer
	assert.Equal(t, supervisor.StateRunning, h.child("a").State)
	assert.Zero(t, h.events.count(supervisor.ChildFailed, "a"))
}

func TestPanicInGetHealthIsAFailure(t *testing.T) {
	h := newHarness(t, timing(nil))
	a := testchild.NewController("a", testchild.Behavior{Health: func() (bool, string) { panic("health bug") }})
	h.start(controllerSpec(a))
	col := childactor.NewHealthCollector(h.handle.System)
	h.handle.System.Root.Send(h.handle.PID, GatherHealth{Collector: col})
	<-col.Done()
	statuses, ok := col.Close("silent")
	require.True(t, ok)
	require.Len(t, statuses, 1)
	assert.False(t, statuses[0].Healthy)
	assert.Contains(t, statuses[0].Message, "panic in GetHealth: health bug")
	h.events.waitCount(t, supervisor.ChildFailed, "a", 1)
	h.waitState("a", supervisor.StateBackingOff)
}
