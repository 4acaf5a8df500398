package supervise

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const wait = 10 * time.Second

// harness is a root supervisor in an actor system of its own.
type harness struct {
	t      *testing.T
	clock  *testingclock.FakeClock // nil when the harness runs on real time
	handle *Handle
	events *eventLog
}

type harnessOption func(*Config)

func withRealClock() harnessOption { return func(c *Config) { c.Clock = nil } }

// withPolicy changes the harness's Policy, the defaults at first.
func withPolicy(mod func(*Policy)) harnessOption {
	return func(c *Config) {
		c.Policy = DefaultPolicy()
		mod(&c.Policy)
	}
}

func newHarness(t *testing.T, timing Timing, opts ...harnessOption) *harness {
	t.Helper()
	fake := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	cfg := Config{
		Mode:   ModeControllers,
		Timing: timing,
		Clock:  fake,
		Jitter: func() float64 { return 0 },
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
	h, err := Spawn(system, "manager", cfg)
	require.NoError(t, err)
	hs := &harness{t: t, handle: h, events: &eventLog{}}
	if cfg.Clock != nil {
		hs.clock = fake
	}
	h.Bus.Subscribe(hs.events.add)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, _ = hs.ask(supervisor.ShutdownManager{Ctx: ctx})
		select {
		case <-h.Observed.Terminated():
		case <-ctx.Done():
			t.Error("the supervisor did not terminate")
		}
		<-h.Bus.Drained()
	})
	return hs
}

func (h *harness) ask(msg any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return Ask(ctx, h.handle.System, h.handle.PID, h.handle.Observed.Terminated(), msg)
}

func (h *harness) start(specs ...childactor.Spec) {
	h.t.Helper()
	_, err := h.ask(StartManager{Ctx: context.Background(), Children: specs})
	require.NoError(h.t, err)
}

func (h *harness) status() supervisor.Status {
	h.t.Helper()
	v, err := h.ask(supervisor.GetStatus{})
	require.NoError(h.t, err)
	return v.(supervisor.Status)
}

func (h *harness) child(name string) supervisor.ChildStatus {
	h.t.Helper()
	c, ok := h.status().Child(name)
	require.True(h.t, ok, "no child %q", name)
	return c
}

// waitFor polls the status until cond holds.
func (h *harness) waitFor(what string, cond func(supervisor.Status) bool) {
	h.t.Helper()
	var last supervisor.Status
	ok := testchild.Eventually(wait, func() bool { last = h.status(); return cond(last) })
	require.True(h.t, ok, "timed out waiting for %s; last status: %+v", what, last)
}

func (h *harness) waitState(name string, state supervisor.ChildState) {
	h.t.Helper()
	h.waitFor(name+" "+string(state), func(s supervisor.Status) bool {
		c, _ := s.Child(name)
		return c.State == state
	})
}

// step moves the fake clock and waits until the supervisor has handled
// what the step fired (a GetStatus round trip comes after it).
func (h *harness) step(d time.Duration) {
	h.clock.Step(d)
	h.status()
}

// settleProbe waits until the liveness sweep in flight has been handled:
// its deadline timer is gone (onProbeDone stops it, in Close), and a
// GetStatus round trip comes after probeDone.
func (h *harness) settleProbe() {
	h.t.Helper()
	require.True(h.t, testchild.Eventually(wait, func() bool { return h.clock.Waiters() == 1 }),
		"a probe is still waiting for its deadline")
	h.status()
}

func controllerSpec(c *testchild.Controller) childactor.Spec {
	return childactor.Spec{Name: c.Name(), Kind: actors.KindController, Impl: c}
}

// eventLog records events.
type eventLog struct {
	mu     sync.Mutex
	events []supervisor.Event
}

func (l *eventLog) add(e supervisor.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) all() []supervisor.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]supervisor.Event(nil), l.events...)
}

func (l *eventLog) count(t supervisor.EventType, child string) int {
	n := 0
	for _, e := range l.all() {
		if e.Type == t && (child == "" || e.Child == child) {
			n++
		}
	}
	return n
}

func (l *eventLog) waitCount(t *testing.T, typ supervisor.EventType, child string, n int) {
	t.Helper()
	require.True(t, testchild.Eventually(wait, func() bool { return l.count(typ, child) >= n }),
		"timed out waiting for %d %s events of %q; have %d", n, typ, child, l.count(typ, child))
}

func runs(c *testchild.Controller) int      { r, _, _ := c.Counts(); return r }
func shutdowns(c *testchild.Controller) int { _, s, _ := c.Counts(); return s }
