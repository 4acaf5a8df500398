package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

const wait = 10 * time.Second // generous bound for anything that should happen promptly

// quiet keeps the managers' failure logs out of the test output.
var quiet = cm.WithLogger(slog.New(slog.DiscardHandler))

// hostContext is a Context whose Start runs a function.
type hostContext struct {
	start func(ctx context.Context) error
}

func (h hostContext) Start(ctx context.Context) error {
	if h.start == nil {
		return nil
	}
	return h.start(ctx)
}
func (hostContext) Kubernetes() kubernetes.Interface { return nil }

func newManager(t *testing.T, host cm.Context, sup *cm.SupervisionSpec) *cm.ControllerManager {
	t.Helper()
	if host == nil {
		host = cm.NewContext(nil)
	}
	m, err := cm.NewControllerManager(host, cm.ControllerManagerConfigSpec{Supervision: sup}, "", quiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m
}

// recorder collects a manager's events.
type recorder struct {
	mu     sync.Mutex
	events []cm.Event
}

func record(m interface{ Subscribe(func(cm.Event)) func() }) *recorder {
	r := &recorder{}
	m.Subscribe(func(e cm.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	return r
}

func (r *recorder) snapshot() []cm.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cm.Event(nil), r.events...)
}

func (r *recorder) phases() []cm.Phase {
	var out []cm.Phase
	for _, e := range r.snapshot() {
		if e.Type == cm.PhaseChanged {
			out = append(out, e.Phase)
		}
	}
	return out
}

func (r *recorder) count(t cm.EventType, child string) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.Type == t && (child == "" || e.Child == child) {
			n++
		}
	}
	return n
}

func TestStartRunsThePhasesInOrder(t *testing.T) {
	var order []string
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	host := hostContext{start: func(context.Context) error { note("preflight"); return nil }}
	m := newManager(t, host, nil)
	events := record(m)
	store := testchild.NewStore("store", func(context.Context, int) error { note("recover"); return nil })
	ctrls := []*testchild.Controller{}
	for i := range 3 {
		c := testchild.NewController(fmt.Sprintf("c%d", i), testchild.Behavior{Run: func(context.Context, int) error {
			note("run")
			return nil
		}})
		ctrls = append(ctrls, c)
		m.Add(c)
	}
	m.AddStore(store)

	require.False(t, m.IsStarting())
	require.Empty(t, m.GetHealth(), "health is empty until starting")
	require.ErrorIs(t, m.GetReadiness(), cm.ErrNotReady)

	require.NoError(t, m.Start(context.Background(), time.Second))
	assert.True(t, m.IsStarting())
	assert.True(t, m.IsStarted())
	assert.NoError(t, m.GetReadiness())
	assert.Equal(t, []string{"preflight", "recover", "run", "run", "run"}, order)

	health := m.GetHealth()
	require.Len(t, health, 3)
	for i, h := range health {
		assert.Equal(t, cm.HealthStatus{Name: fmt.Sprintf("c%d", i), Healthy: true}, h)
	}
	m.ShutdownAndWait(context.Background())
	assert.Equal(t, []cm.Phase{cm.PhaseInitializing, cm.PhaseRecovering, cm.PhaseStarting, cm.PhaseRunning,
		cm.PhaseShuttingDown, cm.PhaseStopped}, events.phases())
	assert.NoError(t, m.Err())
	for _, c := range ctrls {
		runs, shutdowns, _ := c.Counts()
		assert.Equal(t, 1, runs)
		assert.Equal(t, 1, shutdowns)
	}
	assert.Equal(t, 3, events.count(cm.ChildStarted, "")-1, "three controllers and a store started")
}

func TestStartFailures(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		host      cm.Context
		timeout   time.Duration
		ctx       func() (context.Context, context.CancelFunc)
		store     func(ctx context.Context, n int) error
		run       func(ctx context.Context, n int) error
		wantIs    error
		wantText  []string
		wantRuns  int
		wantPanic bool
		// wantStopped: the manager ends Stopped with Err nil, not Failed.
		wantStopped bool
	}{{
		name:     "preflight error",
		host:     hostContext{start: func(context.Context) error { return errBoom }},
		wantIs:   errBoom,
		wantText: []string{"cannot start context", "boom"},
	}, {
		name:     "store error",
		store:    func(context.Context, int) error { return errBoom },
		wantIs:   errBoom,
		wantText: []string{"cannot recover stores", `store "store"`, "boom"},
	}, {
		name:     "controller error",
		run:      func(context.Context, int) error { return errBoom },
		wantIs:   errBoom,
		wantText: []string{"cannot start controllers", `controller "c"`, "Run", "boom"},
		wantRuns: 1,
	}, {
		name:      "controller panic",
		run:       func(context.Context, int) error { panic("kaboom") },
		wantText:  []string{"cannot start controllers", `controller "c"`, "panic in Run", "kaboom"},
		wantRuns:  1,
		wantPanic: true,
	}, {
		name:     "start timeout",
		timeout:  50 * time.Millisecond,
		run:      testchild.Block(nil),
		wantIs:   context.DeadlineExceeded,
		wantRuns: 1,
	}, {
		name: "caller cancels",
		ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		},
		run:         testchild.Block(nil),
		wantIs:      context.DeadlineExceeded,
		wantRuns:    1,
		wantStopped: true, // the caller asked to stop: not a failure of the manager
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newManager(t, tt.host, nil)
			c := testchild.NewController("c", testchild.Behavior{Run: tt.run})
			m.Add(c)
			m.AddStore(testchild.NewStore("store", tt.store))
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()

			err := m.Start(ctx, tt.timeout)
			require.Error(t, err)
			if tt.wantIs != nil {
				assert.ErrorIs(t, err, tt.wantIs)
			}
			for _, s := range tt.wantText {
				assert.Contains(t, err.Error(), s)
			}
			if tt.wantPanic {
				var pe *cm.PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "c", pe.Child)
				assert.Contains(t, string(pe.Stack), "runtime_test.go")
			}
			// The supervisor answered Start once the shutdown had begun,
			// a Start whose own context ended too: what the manager says of
			// itself from then on agrees with the error.
			rerr := m.GetReadiness()
			require.Error(t, rerr)
			assert.NotContains(t, rerr.Error(), "not fully initialized", "Start answered before the shutdown began")
			// A failed start rolls back: the manager fails with the error,
			// and what ran is shut down.
			select {
			case <-m.Done():
			case <-time.After(wait):
				t.Fatal("manager did not stop after a failed start")
			}
			if tt.wantStopped {
				assert.NoError(t, m.Err())
				assert.Equal(t, cm.PhaseStopped, mustStatus(t, m).Phase)
			} else {
				assert.Error(t, m.Err())
				assert.Equal(t, cm.PhaseFailed, mustStatus(t, m).Phase)
			}
			assert.False(t, m.IsStarted())
			runs, shutdowns, _ := c.Counts()
			assert.Equal(t, tt.wantRuns, runs)
			assert.Equal(t, tt.wantRuns, shutdowns, "every Run is followed by one Shutdown")
		})
	}
}

func TestGetReadinessAfterPreflight(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	host := hostContext{start: func(ctx context.Context) error {
		close(entered)
		<-release
		return nil
	}}
	m := newManager(t, host, nil)
	m.Add(testchild.NewController("c", testchild.Behavior{}))
	started := make(chan error, 1)
	go func() { started <- m.Start(context.Background(), 0) }()
	<-entered
	require.ErrorIs(t, m.GetReadiness(), cm.ErrNotReady)
	assert.Contains(t, m.GetReadiness().Error(), "not fully initialized")
	require.Empty(t, m.GetHealth())
	close(release)
	require.NoError(t, <-started)
	require.NoError(t, m.GetReadiness())
}

func TestGetHealthAnswersWithinTheTimeoutWhenAControllerHangs(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	m := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: 100 * time.Millisecond}})
	m.Add(testchild.NewController("ok", testchild.Behavior{}))
	m.Add(testchild.NewController("stuck", testchild.Behavior{Health: func() (bool, string) { <-hang; return true, "" }}))
	require.NoError(t, m.Start(context.Background(), 0))

	for range 3 { // a second query must not pile another goroutine on the stuck one
		begin := time.Now()
		health := m.GetHealth()
		took := time.Since(begin)
		require.Len(t, health, 2)
		assert.Equal(t, cm.HealthStatus{Name: "ok", Healthy: true}, health[0])
		assert.Equal(t, "stuck", health[1].Name)
		assert.False(t, health[1].Healthy)
		assert.Contains(t, health[1].Message, "no health answer within 100ms")
		assert.Less(t, took, 2*time.Second, "GetHealth must return about HealthTimeout")
	}
}

func TestShutdownAndWait(t *testing.T) {
	t.Run("calls every Shutdown in parallel", func(t *testing.T) {
		const n = 5
		var arrived sync.WaitGroup
		arrived.Add(n)
		allIn := make(chan struct{})
		go func() { arrived.Wait(); close(allIn) }()
		m := newManager(t, nil, nil)
		plain := testchild.NewRunnable(func(context.Context) { arrived.Done(); <-allIn })
		m.Add(plain)
		for i := range n - 1 {
			// Each Shutdown returns only once all have been called: a
			// sequential shutdown would never finish.
			m.Add(testchild.NewController(fmt.Sprintf("c%d", i), testchild.Behavior{Shutdown: func(context.Context, int) {
				arrived.Done()
				<-allIn
			}}))
		}
		require.NoError(t, m.Start(context.Background(), 0))
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
		require.NoError(t, ctx.Err(), "ShutdownAndWait returned because everything stopped")
		assert.Equal(t, 1, plain.Shutdowns(), "a plain runnable is shut down with the rest")
		assert.Equal(t, cm.PhaseStopped, mustStatus(t, m).Phase)
	})
	t.Run("is bounded by its context", func(t *testing.T) {
		release := make(chan struct{})
		m := newManager(t, nil, nil)
		m.Add(testchild.NewController("stuck", testchild.Behavior{Shutdown: func(context.Context, int) { <-release }}))
		require.NoError(t, m.Start(context.Background(), 0))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		begin := time.Now()
		m.ShutdownAndWait(ctx)
		assert.Less(t, time.Since(begin), 2*time.Second)
		select {
		case <-m.Done():
			t.Fatal("the manager must not stop while a Shutdown has not returned")
		default:
		}
		close(release)
		<-m.Done()
	})
	t.Run("before Start stops the manager", func(t *testing.T) {
		m := newManager(t, nil, nil)
		m.ShutdownAndWait(context.Background())
		<-m.Done()
		assert.NoError(t, m.Err())
		err := m.Start(context.Background(), 0)
		assert.Error(t, err)
		m.ShutdownAndWait(context.Background()) // twice is fine
	})
}

func TestAddValidation(t *testing.T) {
	tests := []struct {
		name string
		add  func(m *cm.ControllerManager)
		want []string
	}{{
		name: "nil runnable",
		add:  func(m *cm.ControllerManager) { m.Add(testchild.NewController("a", testchild.Behavior{}), nil) },
		want: []string{"child #1", "nil"},
	}, {
		name: "duplicate names",
		add: func(m *cm.ControllerManager) {
			m.Add(testchild.NewController("a", testchild.Behavior{}), testchild.NewController("a", testchild.Behavior{}))
		},
		want: []string{"#0", "#1", `"a"`},
	}, {
		name: "empty name",
		add:  func(m *cm.ControllerManager) { m.Add(testchild.NewController("", testchild.Behavior{})) },
		want: []string{"child #0", "empty name"},
	}, {
		name: "every problem at once",
		add: func(m *cm.ControllerManager) {
			m.Add(nil, testchild.NewController("a", testchild.Behavior{}), testchild.NewController("a", testchild.Behavior{}))
			m.AddStore(nil)
		},
		want: []string{"child #0", "#1 and #2", "child #3"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, nil, nil)
			tt.add(m)
			err := m.Start(context.Background(), 0)
			require.Error(t, err)
			for _, s := range tt.want {
				assert.Contains(t, err.Error(), s)
			}
			<-m.Done()
			assert.Equal(t, cm.PhaseFailed, mustStatus(t, m).Phase)
		})
	}
}

// nameless is a controller without a Name method: its name is
// GetHealth().Name, as in furiko.
type nameless struct{ health func() cm.HealthStatus }

func (n nameless) Run(context.Context) error  { return nil }
func (n nameless) Shutdown(context.Context)   {}
func (n nameless) GetHealth() cm.HealthStatus { return n.health() }

func TestControllerNamedByGetHealth(t *testing.T) {
	m := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: 50 * time.Millisecond}})
	m.Add(nameless{health: func() cm.HealthStatus { return cm.HealthStatus{Name: "from-health", Healthy: true} }})
	require.NoError(t, m.Start(context.Background(), 0))
	assert.Equal(t, []cm.HealthStatus{{Name: "from-health", Healthy: true}}, m.GetHealth())

	hang := make(chan struct{})
	defer close(hang)
	m2 := newManager(t, nil, &cm.SupervisionSpec{HealthTimeout: metav1.Duration{Duration: 50 * time.Millisecond}})
	m2.Add(nameless{health: func() cm.HealthStatus { <-hang; return cm.HealthStatus{} }})
	m2.Add(nameless{health: func() cm.HealthStatus { panic("no name") }})
	err := m2.Start(context.Background(), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GetHealth did not return within 50ms")
	assert.Contains(t, err.Error(), "panic in GetHealth: no name")
}

func TestStartTwiceAndAddAfterStart(t *testing.T) {
	m := newManager(t, nil, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	m.Add(c)
	require.NoError(t, m.Start(context.Background(), 0))
	require.ErrorIs(t, m.Start(context.Background(), 0), supervisor.ErrStartTwice)
	late := testchild.NewController("late", testchild.Behavior{})
	m.Add(late)
	st := mustStatus(t, m)
	assert.Len(t, st.Children, 1, "Add after Start has no effect")
	runs, _, _ := late.Counts()
	assert.Zero(t, runs)
}

func TestWebhookManagerStart(t *testing.T) {
	var inStart atomic.Int32
	allIn := make(chan struct{})
	start := func(context.Context, int) error {
		if inStart.Add(1) == 2 {
			close(allIn)
		}
		<-allIn // both Starts must run at once for either to return
		return nil
	}
	m := cm.NewWebhookManager(cm.NewContext(nil), quiet)
	t.Cleanup(func() { m.ShutdownAndWait(context.Background()) })
	a := testchild.NewWebhook("a", "/a", start, nil)
	b := testchild.NewWebhook("b", "/b", start, nil)
	plain := testchild.NewRunnable(nil)
	m.Add(a, b, plain)
	require.ErrorIs(t, m.GetReadiness(), cm.ErrNotReady)
	require.NoError(t, m.Start(context.Background()))
	assert.NoError(t, m.GetReadiness())
	assert.True(t, m.IsStarting())
	assert.True(t, m.IsStarted())
	m.ShutdownAndWait(context.Background())
	for _, w := range []*testchild.Webhook{a, b} {
		starts, shutdowns, _ := w.Counts()
		assert.Equal(t, 1, starts)
		assert.Equal(t, 1, shutdowns)
	}
	assert.Equal(t, 1, plain.Shutdowns())

	failing := cm.NewWebhookManager(cm.NewContext(nil), quiet)
	errBad := errors.New("bad cert")
	failing.Add(testchild.NewWebhook("bad", "/bad", func(context.Context, int) error { return errBad }, nil))
	err := failing.Start(context.Background())
	require.ErrorIs(t, err, errBad)
	assert.Contains(t, err.Error(), "cannot start webhooks")
	failing.ShutdownAndWait(context.Background())
}

func TestBaseManager(t *testing.T) {
	var preflights atomic.Int32
	m := cm.NewBaseManager(hostContext{start: func(context.Context) error { preflights.Add(1); return nil }}, quiet)
	plain := testchild.NewRunnable(nil)
	m.Add(plain)
	require.NoError(t, m.Start(context.Background()))
	assert.NoError(t, m.GetReadiness())
	assert.Empty(t, m.GetHealth())
	m.ShutdownAndWait(context.Background())
	assert.EqualValues(t, 1, preflights.Load())
	assert.Equal(t, 1, plain.Shutdowns())
}

func TestSubscribersNeverStallTheManager(t *testing.T) {
	m := newManager(t, nil, nil)
	block := make(chan struct{})
	var slowSaw atomic.Int32
	m.Subscribe(func(cm.Event) { slowSaw.Add(1); <-block })
	m.Subscribe(func(cm.Event) { panic("subscriber bug") })
	fast := record(m)
	for i := range 10 {
		m.Add(testchild.NewController(fmt.Sprintf("c%d", i), testchild.Behavior{}))
	}
	require.NoError(t, m.Start(context.Background(), 0))
	// The slow subscriber's goroutine takes its first event when it is
	// scheduled, which a loaded machine may put after the fast one's third:
	// wait for it, then it blocks there whatever else comes.
	require.True(t, testchild.Eventually(wait, func() bool { return slowSaw.Load() >= 1 }), "the slow subscriber never got its first event")
	require.True(t, testchild.Eventually(wait, func() bool { return fast.count(cm.PhaseChanged, "") >= 3 }))
	assert.EqualValues(t, 1, slowSaw.Load(), "the slow subscriber is still on its first event")
	close(block)
	m.ShutdownAndWait(context.Background())
	assert.Equal(t, cm.PhaseStopped, fast.phases()[len(fast.phases())-1], "the last event arrives before ShutdownAndWait returns")
	assert.Equal(t, len(fast.snapshot()), int(slowSaw.Load()), "the slow subscriber got every event, in the end")
}

func TestSubscriberThatFallsBehindIsToldWhatItLost(t *testing.T) {
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", cm.WithEventBuffer(4), quiet)
	require.NoError(t, err)
	block := make(chan struct{})
	var got []cm.Event
	var mu sync.Mutex
	first := true
	m.Subscribe(func(e cm.Event) {
		if first {
			first = false
			<-block
		}
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	})
	for i := range 20 {
		m.Add(testchild.NewController(fmt.Sprintf("c%d", i), testchild.Behavior{}))
	}
	require.NoError(t, m.Start(context.Background(), 0))
	close(block)
	m.ShutdownAndWait(context.Background())
	mu.Lock()
	defer mu.Unlock()
	var dropped int
	for _, e := range got {
		if e.Type == cm.EventsDropped {
			dropped += e.Restarts
			assert.Contains(t, e.Err.Error(), "events dropped")
		}
	}
	assert.Positive(t, dropped)
	assert.Equal(t, cm.PhaseStopped, got[len(got)-1].Phase, "the newest events are kept")
}

func TestRequestAndSend(t *testing.T) {
	m := newManager(t, nil, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	m.Add(c)
	ctx := context.Background()
	_, err := m.Request(ctx, supervisor.RestartChild{Name: "c"})
	require.ErrorIs(t, err, supervisor.ErrNotRunning, "before Start")
	require.NoError(t, m.Start(ctx, 0))

	_, err = m.Request(ctx, supervisor.StopChild{Name: "nope"})
	require.ErrorIs(t, err, supervisor.ErrUnknownChild)
	assert.Contains(t, err.Error(), `"nope"`)

	_, err = m.Request(ctx, supervisor.RestartChild{Name: "c"})
	require.NoError(t, err)
	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, 2, runs)
	assert.Equal(t, 1, shutdowns)
	cs, _ := mustStatus(t, m).Child("c")
	assert.Equal(t, 1, cs.Restarts)
	assert.NotNil(t, m.PID())

	m.Send(supervisor.StopChild{Name: "c"})
	require.True(t, testchild.Eventually(wait, func() bool {
		cs, _ := mustStatus(t, m).Child("c")
		return cs.State == supervisor.StateStopped
	}))

	m.ShutdownAndWait(ctx)
	st := mustStatus(t, m) // the final status, after the actors are gone
	assert.Equal(t, cm.PhaseStopped, st.Phase)
	_, err = m.Request(ctx, supervisor.StartChild{Name: "c"})
	assert.ErrorIs(t, err, supervisor.ErrStopped)
}

func TestFreeFunctions(t *testing.T) {
	errBoom := errors.New("boom")
	ctx := context.Background()
	t.Run("RunControllers", func(t *testing.T) {
		ok := testchild.NewController("ok", testchild.Behavior{})
		bad := testchild.NewController("bad", testchild.Behavior{Run: func(context.Context, int) error { return errBoom }})
		err := cm.RunControllers(ctx, []cm.Controller{ok, bad})
		require.ErrorIs(t, err, errBoom)
		runs, _, _ := ok.Counts()
		assert.Equal(t, 1, runs, "one error does not stop the others")
		require.NoError(t, cm.RunControllers(ctx, nil))
		panicky := testchild.NewController("p", testchild.Behavior{Run: func(context.Context, int) error { panic("x") }})
		var pe *cm.PanicError
		require.ErrorAs(t, cm.RunControllers(ctx, []cm.Controller{panicky}), &pe)
	})
	t.Run("RecoverStores", func(t *testing.T) {
		err := cm.RecoverStores(ctx, []cm.Store{
			testchild.NewStore("a", nil),
			testchild.NewStore("b", func(context.Context, int) error { panic(errBoom) }),
		})
		require.ErrorIs(t, err, errBoom, "a panic with an error is that error")
		assert.Contains(t, err.Error(), "panic in Recover")
	})
	t.Run("ShutdownRunnables", func(t *testing.T) {
		a, b := testchild.NewRunnable(nil), testchild.NewRunnable(func(context.Context) { panic("bad shutdown") })
		cm.ShutdownRunnables(ctx, []cm.Runnable{a, b})
		assert.Equal(t, 1, a.Shutdowns())
		assert.Equal(t, 1, b.Shutdowns())
	})
	t.Run("StartWebhooksAndWait", func(t *testing.T) {
		blocked := testchild.NewWebhook("blocked", "/b", testchild.Block(nil), nil)
		bad := testchild.NewWebhook("bad", "/x", func(context.Context, int) error { return errBoom }, nil)
		err := cm.StartWebhooksAndWait(ctx, []cm.Webhook{blocked, bad})
		require.ErrorIs(t, err, errBoom, "the first error cancels the others and is returned")
	})
}

func TestConfigValidation(t *testing.T) {
	yes := true
	neg := metav1.Duration{Duration: -time.Second}
	tests := []struct {
		name string
		cfg  cm.ControllerManagerConfigSpec
		want []string
	}{{
		name: "supervision fields",
		cfg: cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
			Strategy: "Sometimes", MaxRestarts: -1, RestartWindow: neg, HealthTimeout: neg,
		}},
		want: []string{"supervision.strategy", "supervision.maxRestarts", "supervision.restartWindow", "supervision.healthTimeout"},
	}, {
		name: "election without a lease name or clientset",
		cfg:  cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{Enabled: &yes}},
		want: []string{"leaderElection.leaseName"},
	}, {
		name: "election durations",
		cfg: cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: "x", LeaseDuration: metav1.Duration{Duration: time.Second},
			RenewDeadline: metav1.Duration{Duration: 2 * time.Second}, RetryPeriod: neg,
		}},
		want: []string{"leaderElection.retryPeriod", "leaderElection.leaseDuration"},
	}, {
		name: "election with no clientset",
		cfg:  cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{Enabled: &yes, LeaseName: "x"}},
		want: []string{"clientset"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := cm.NewControllerManager(cm.NewContext(nil), tt.cfg, "", quiet)
			require.Error(t, err)
			assert.Nil(t, m)
			for _, s := range tt.want {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func mustStatus(t *testing.T, m interface {
	Status(context.Context) (cm.Status, error)
}) cm.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := m.Status(ctx)
	require.NoError(t, err)
	return st
}

var _ = strings.Contains

// A Start whose context ends while the pre-flight ignores its own returns
// all the same, answered by the supervisor once the shutdown has begun:
// waiting for that answer (rather than returning on the context) must not
// make Start wait for user code.
func TestStartCancelledDuringAHungPreflightReturns(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	host := hostContext{start: func(context.Context) error {
		close(entered)
		<-release // ignores its context
		return nil
	}}
	m := newManager(t, host, nil)
	m.Add(testchild.NewController("c", testchild.Behavior{}))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- m.Start(ctx, 0) }()
	<-entered
	cancel()
	select {
	case err := <-started:
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, "controllermanager: start abandoned, its context ended: context canceled", err.Error())
	case <-time.After(wait):
		t.Fatal("Start did not return while the pre-flight hung")
	}
	rerr := m.GetReadiness()
	require.Error(t, rerr)
	assert.NotContains(t, rerr.Error(), "not fully initialized")
}
