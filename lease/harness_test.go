package lease_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The timing of every test: a 2s lease, renewed every 100ms, lost after 1s
// without renewal. client-go runs on the real clock.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = time.Second
	retryPeriod   = 100 * time.Millisecond
	namespace     = "ns"
	leaseName     = "lease"
	patience      = 10 * time.Second // bound on anything that should happen promptly
)

// report is a message the elector sent its parent, and when.
type report struct {
	msg any
	at  time.Time
}

// parentActor spawns electors and hands what they report to the test.
type parentActor struct {
	props   *actor.Props
	reports chan report
	elector *actor.PID
}

// The test's messages to the parent.
type (
	spawnElector struct{}
	stopElector  struct{}
)

func (p *parentActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, spawnElector:
		p.elector = ctx.Spawn(p.props)
	case stopElector:
		ctx.Stop(p.elector)
	case lease.Resign:
		ctx.Send(p.elector, m)
	case lease.Elected, lease.NewLeader, lease.Lost, lease.Released:
		p.reports <- report{msg: m, at: time.Now()}
	}
}

// replica is one elector under a parent, in an actor system of its own.
type replica struct {
	t       testing.TB
	system  *actor.ActorSystem
	parent  *actor.PID
	reports chan report
	lock    resourcelock.Interface
}

func newLock(t testing.TB, client *leasetest.Client, identity string) resourcelock.Interface {
	lock, err := lease.NewLeaseLock(client, namespace, leaseName, identity)
	require.NoError(t, err)
	return lock
}

func config(lock resourcelock.Interface) lease.Config {
	return lease.Config{Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}
}

// startReplica spawns a parent whose elector campaigns at once.
func startReplica(t testing.TB, cfg lease.Config) *replica {
	t.Helper()
	props, err := lease.NewProps(cfg)
	require.NoError(t, err)
	// Messages to a stopped elector are dead letters; protoactor's
	// throttle of their logs runs a goroutine per interval: keep it short.
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
	r := &replica{t: t, system: system, reports: make(chan report, 100), lock: cfg.Lock}
	r.parent = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &parentActor{props: props, reports: r.reports}
	}))
	t.Cleanup(func() {
		require.NoError(t, system.Root.StopFuture(r.parent).Wait())
		system.Shutdown()
	})
	return r
}

// next waits for the next report of type T, skipping others (NewLeader).
func next[T any](r *replica) (T, time.Time) {
	r.t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case rep := <-r.reports:
			if m, ok := rep.msg.(T); ok {
				return m, rep.at
			}
		case <-timeout:
			var zero T
			r.t.Fatalf("no %T within %s", zero, patience)
			return zero, time.Time{}
		}
	}
}

// none fails if a report of type T arrives within d.
func none[T any](r *replica, d time.Duration) {
	r.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case rep := <-r.reports:
			if _, ok := rep.msg.(T); ok {
				r.t.Fatalf("unexpected %T", rep.msg)
			}
		case <-timeout:
			return
		}
	}
}

func (r *replica) send(msg any) { r.system.Root.Send(r.parent, msg) }

// stallingLock is a lock whose Update can be made to hang, ignoring its
// context, as a broken lock would; it counts calls in flight.
type stallingLock struct {
	resourcelock.Interface
	mu          sync.Mutex
	stalled     chan struct{} // non-nil: Update waits until it is closed
	inFlight    int
	maxInFlight int
}

func (l *stallingLock) enter() func() {
	l.mu.Lock()
	l.inFlight++
	l.maxInFlight = max(l.maxInFlight, l.inFlight)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
	}
}

func (l *stallingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	defer l.enter()()
	return l.Interface.Get(ctx)
}

func (l *stallingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	defer l.enter()()
	return l.Interface.Create(ctx, ler)
}

func (l *stallingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	defer l.enter()()
	l.mu.Lock()
	stalled := l.stalled
	l.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
	return l.Interface.Update(ctx, ler)
}

// stall makes Update hang until the returned function is called.
func (l *stallingLock) stall() (unstall func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.stalled = ch
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.stalled = nil
			l.mu.Unlock()
			close(ch)
		})
	}
}

func (l *stallingLock) maxConcurrent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxInFlight
}

// eventually polls cond every 10ms until it holds or patience runs out.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.After(patience)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("not within %s: %s", patience, msg)
		}
	}
}
