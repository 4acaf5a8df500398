package childactor_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// parent spawns one child and records what it reports.
type parent struct {
	spec  childactor.Spec
	child *actor.PID
	ready chan struct{}

	mu   sync.Mutex
	msgs []any
	got  chan struct{}
}

func (p *parent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.child = ctx.Spawn(childactor.NewProps(p.spec, childactor.Config{}))
		close(p.ready)
	case childactor.Started, childactor.StartFailed, childactor.Stopped, childactor.Failed:
		p.mu.Lock()
		p.msgs = append(p.msgs, m)
		p.mu.Unlock()
		p.got <- struct{}{}
	}
}

type fixture struct {
	t      *testing.T
	system *actor.ActorSystem
	p      *parent
}

func newFixture(t *testing.T, spec childactor.Spec) *fixture {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
	p := &parent{spec: spec, ready: make(chan struct{}), got: make(chan struct{}, 100)}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	<-p.ready
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	return &fixture{t: t, system: system, p: p}
}

func (f *fixture) send(msg any) { f.system.Root.Send(f.p.child, msg) }

// next waits for the child's next report to its parent.
func (f *fixture) next() any {
	f.t.Helper()
	select {
	case <-f.p.got:
	case <-time.After(wait):
		f.t.Fatal("no report from the child")
	}
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	m := f.p.msgs[0]
	f.p.msgs = f.p.msgs[1:]
	return m
}

func (f *fixture) none() {
	f.t.Helper()
	select {
	case <-f.p.got:
		f.t.Fatalf("unexpected report: %v", f.p.msgs)
	default:
	}
}

func TestStartAndStop(t *testing.T) {
	release := make(chan struct{})
	c := testchild.NewController("c", testchild.Behavior{Shutdown: func(context.Context, int) { <-release }})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 7, Ctx: context.Background()})
	assert.Equal(t, "c", f.next().(childactor.Started).Name)
	f.send(childactor.Stop{Ctx: context.Background()})
	f.send(childactor.Stop{Ctx: context.Background()}) // while Shutdown runs: answered by the same Stopped
	close(release)
	st := f.next().(childactor.Stopped)
	assert.Equal(t, uint64(7), st.Gen)
	f.send(childactor.Stop{Ctx: context.Background()}) // stopped already: answered at once
	assert.IsType(t, childactor.Stopped{}, f.next())
	f.none()
	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 1, runs)
	assert.Equal(t, 1, shutdowns, "Shutdown runs once per incarnation")
}

func TestStartFailures(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		run     func(context.Context, int) error
		check   func(t *testing.T, err error)
		timeout time.Duration
	}{{
		name: "error",
		run:  func(context.Context, int) error { return errBoom },
		check: func(t *testing.T, err error) {
			var ce *actors.CallError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "Run", ce.Op)
			assert.ErrorIs(t, err, errBoom)
			assert.EqualError(t, err, `controller "c": Run: boom`)
		},
	}, {
		name: "panic",
		run:  func(context.Context, int) error { panic(errBoom) },
		check: func(t *testing.T, err error) {
			var pe *actors.PanicError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "c", pe.Child)
			assert.Equal(t, actors.KindController, pe.Kind)
			assert.ErrorIs(t, err, errBoom, "panic(err) unwraps to err")
			assert.Contains(t, string(pe.Stack), "child_test.go")
		},
	}, {
		name:    "timeout",
		run:     testchild.Block(nil),
		timeout: 20 * time.Millisecond,
		check:   func(t *testing.T, err error) { assert.ErrorIs(t, err, context.DeadlineExceeded) },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testchild.NewController("c", testchild.Behavior{Run: tt.run})
			f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
			f.send(childactor.Start{Gen: 1, Ctx: context.Background(), Timeout: tt.timeout})
			tt.check(t, f.next().(childactor.StartFailed).Err)
			// A failed start still owes its Shutdown.
			f.send(childactor.Stop{Ctx: context.Background()})
			f.next()
			_, shutdowns, _ := c.Counts()
			assert.Equal(t, 1, shutdowns)
		})
	}
}

func TestStopWhileStartingCancelsTheStart(t *testing.T) {
	var runCtx atomic.Pointer[context.Context]
	entered := make(chan struct{})
	c := testchild.NewController("c", testchild.Behavior{Run: func(ctx context.Context, _ int) error {
		runCtx.Store(&ctx)
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	<-entered
	f.send(childactor.Stop{Ctx: context.Background()})
	st := f.next().(childactor.Stopped) // not StartFailed: the stop reports the outcome
	assert.Equal(t, uint64(1), st.Gen)
	assert.ErrorIs(t, (*runCtx.Load()).Err(), context.Canceled)
	f.none()
}

func TestReportedFailures(t *testing.T) {
	release := make(chan struct{})
	var report func(error)
	var mu sync.Mutex
	c := testchild.NewController("c", testchild.Behavior{Run: func(ctx context.Context, n int) error {
		r, ok := actors.FailureReporter(ctx)
		require.True(t, ok)
		mu.Lock()
		report = r
		mu.Unlock()
		if n == 1 {
			r(errors.New("while starting")) // held until Run returns
			<-release
		}
		return nil
	}})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	close(release)
	assert.IsType(t, childactor.Started{}, f.next())
	failed := f.next().(childactor.Failed)
	assert.Contains(t, failed.Err.Error(), "while starting")
	mu.Lock()
	r := report
	mu.Unlock()
	r(nil) // a second report of the same incarnation is not a second failure
	f.send(childactor.Stop{Ctx: context.Background()})
	assert.IsType(t, childactor.Stopped{}, f.next())

	f.send(childactor.Start{Gen: 2, Ctx: context.Background()})
	assert.IsType(t, childactor.Started{}, f.next())
	r(errors.New("stale")) // the reporter of incarnation 1
	mu.Lock()
	current := report
	mu.Unlock()
	current(nil)
	failed = f.next().(childactor.Failed)
	assert.Equal(t, uint64(2), failed.Gen)
	assert.ErrorIs(t, failed.Err, actors.ErrReported, "a nil report is ErrReported")
	f.none()

	assert.False(t, actors.ReportFailure(context.Background(), errors.New("x")), "not from a manager")
}

func TestHealthQueries(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	c := testchild.NewController("c", testchild.Behavior{Health: func() (bool, string) {
		calls.Add(1)
		<-release
		return false, "degraded"
	}})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	f.next()

	cols := make([]*childactor.HealthCollector, 3)
	for i := range cols {
		cols[i] = childactor.NewHealthCollector(f.system)
		cols[i].Expect([]actors.HealthStatus{{Name: "c"}}, []int{0})
		f.send(childactor.HealthQuery{Index: 0, ReplyTo: cols[i].PID()})
	}
	// The mailbox is FIFO: once a Stop sent after the queries is answered,
	// the child has taken all three while the first GetHealth is blocked.
	f.send(childactor.Stop{Ctx: context.Background()})
	assert.IsType(t, childactor.Stopped{}, f.next())
	select {
	case <-cols[0].Done():
		t.Fatal("answered before GetHealth returned")
	default:
	}
	close(release)
	for _, col := range cols {
		<-col.Done()
		st, ok := col.Close("silent")
		require.True(t, ok)
		assert.Equal(t, []actors.HealthStatus{{Name: "c", Healthy: false, Message: "degraded"}}, st)
	}
	assert.Equal(t, int32(1), calls.Load(), "queries arriving during a call share its answer")
}

func TestHealthCollectorMarksSilence(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	col := childactor.NewHealthCollector(system)
	col.Expect([]actors.HealthStatus{{Name: "a"}, {Name: "b", Healthy: true, Message: "stopped"}, {Name: "c"}}, []int{0, 2})
	system.Root.Send(col.PID(), childactor.HealthAnswer{Index: 2, Status: actors.HealthStatus{Name: "ignored", Healthy: true}})
	system.Root.Send(col.PID(), childactor.HealthAnswer{Index: 2, Status: actors.HealthStatus{Healthy: false}}) // answered twice: ignored
	system.Root.Send(col.PID(), childactor.HealthAnswer{Index: 9})                                              // out of range: ignored
	st, ok := col.Close("no answer")
	require.True(t, ok)
	assert.Equal(t, []actors.HealthStatus{
		{Name: "a", Message: "no answer"},
		{Name: "b", Healthy: true, Message: "stopped"},
		{Name: "c", Healthy: true},
	}, st)

	empty := childactor.NewHealthCollector(system)
	_, ok = empty.Close("x")
	assert.False(t, ok, "never expected: the supervisor did not take the request")
}

type named struct{ name func() string }

func (n named) Name() string                 { return n.name() }
func (named) Shutdown(context.Context)       {}
func (named) Run(context.Context) error      { return nil }
func (named) GetHealth() actors.HealthStatus { return actors.HealthStatus{} }

type healthNamed struct{ named }

func TestResolveName(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	n, err := childactor.ResolveName(named{name: func() string { return "x" }}, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "x", n)
	_, err = childactor.ResolveName(named{name: func() string { <-hang; return "" }}, 20*time.Millisecond)
	assert.ErrorContains(t, err, "Name did not return within 20ms")
	_, err = childactor.ResolveName(named{name: func() string { panic("no") }}, time.Second)
	assert.ErrorContains(t, err, "panic in Name: no")
	n, err = childactor.ResolveName(testchild.NewRunnable(nil), time.Second)
	require.NoError(t, err)
	assert.Empty(t, n, "a plain runnable has no name")
}

// A restart sent with its Stop (Stop.Then) starts the next incarnation once
// Shutdown has returned, never before; a second Stop while Shutdown runs
// revokes it, and so does a backoff that has not passed yet.
func TestStopThenRestarts(t *testing.T) {
	release := make(chan struct{}, 3)
	var shutdownReturned atomic.Int32
	runOverlapped := make(chan int, 3)
	c := testchild.NewController("c", testchild.Behavior{
		Run: func(_ context.Context, n int) error {
			if n > 1 && int(shutdownReturned.Load()) < n-1 {
				runOverlapped <- n
			}
			return nil
		},
		Shutdown: func(_ context.Context, n int) {
			<-release
			shutdownReturned.Store(int32(n))
		},
	})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	require.IsType(t, childactor.Started{}, f.next())

	// Taken: Shutdown, then the next Run, without a Start.
	f.send(childactor.Stop{Ctx: context.Background(), Then: &childactor.Start{Gen: 2, Ctx: context.Background()}})
	release <- struct{}{}
	st := f.next().(childactor.Stopped)
	assert.Equal(t, uint64(1), st.Gen)
	assert.Equal(t, uint64(2), st.Then, "the restart sent along is taken")
	started := f.next().(childactor.Started)
	assert.Equal(t, uint64(2), started.Gen)

	// Revoked by a second Stop while Shutdown runs.
	f.send(childactor.Stop{Ctx: context.Background(), Then: &childactor.Start{Gen: 3, Ctx: context.Background()}})
	f.send(childactor.Stop{Ctx: context.Background()})
	release <- struct{}{}
	st = f.next().(childactor.Stopped)
	assert.Equal(t, uint64(2), st.Gen)
	assert.Zero(t, st.Then, "a second Stop revokes the restart")
	f.send(childactor.Stop{Ctx: context.Background()}) // idle: answered at once, nothing runs
	assert.Equal(t, uint64(2), f.next().(childactor.Stopped).Gen)

	// Not taken while the backoff has not passed.
	f.send(childactor.Start{Gen: 4, Ctx: context.Background()})
	require.IsType(t, childactor.Started{}, f.next())
	f.send(childactor.Stop{Ctx: context.Background(), Then: &childactor.Start{Gen: 5, Ctx: context.Background(),
		NotBefore: time.Now().Add(time.Hour)}})
	release <- struct{}{}
	st = f.next().(childactor.Stopped)
	assert.Equal(t, uint64(4), st.Gen)
	assert.Zero(t, st.Then, "a restart still backing off is left to the parent")
	f.send(childactor.Stop{Ctx: context.Background()})
	assert.Equal(t, uint64(4), f.next().(childactor.Stopped).Gen)
	f.none()

	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 3, runs)
	assert.Equal(t, 3, shutdowns)
	select {
	case n := <-runOverlapped:
		t.Fatalf("Run %d began before the Shutdown before it returned", n)
	default:
	}
}

// With a restart ticket, a failure of the running incarnation restarts it
// at once, Shutdown then Run, as many times in a row as the ticket allows;
// a Stop takes the ticket back.
func TestRestartTicket(t *testing.T) {
	c := testchild.NewController("c", testchild.Behavior{})
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	ticket := &childactor.RestartTicket{Ctx: context.Background(), ShutdownTimeout: wait}
	errFailed := errors.New("failed")

	f.send(childactor.Start{Gen: 1, Ctx: context.Background(), Restart: ticket, Restarts: 1})
	require.IsType(t, childactor.Started{}, f.next())
	c.Fail(errFailed)
	failed := f.next().(childactor.Failed)
	assert.Equal(t, uint64(1), failed.Gen)
	assert.True(t, failed.Restarting, "a child with a ticket restarts itself")
	st := f.next().(childactor.Stopped)
	assert.Equal(t, uint64(1), st.Gen)
	assert.Equal(t, uint64(2), st.Then, "it numbers the next incarnation")
	assert.Equal(t, uint64(2), f.next().(childactor.Started).Gen)

	// The ticket was good for one restart: the next failure asks.
	c.Fail(errFailed)
	failed = f.next().(childactor.Failed)
	assert.Equal(t, uint64(2), failed.Gen)
	assert.False(t, failed.Restarting, "a spent ticket restarts nothing")
	f.send(childactor.Stop{Ctx: context.Background()})
	assert.Zero(t, f.next().(childactor.Stopped).Then)

	// A Stop takes the ticket back.
	f.send(childactor.Start{Gen: 3, Ctx: context.Background(), Restart: ticket, Restarts: 5})
	require.IsType(t, childactor.Started{}, f.next())
	f.send(childactor.Stop{Ctx: context.Background()})
	assert.Equal(t, uint64(3), f.next().(childactor.Stopped).Gen)
	f.none()

	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 3, runs)
	assert.Equal(t, 3, shutdowns)
}
