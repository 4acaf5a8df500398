package supervisor

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
)

// Strategy says which children restart when one fails.
type Strategy string

// The restart strategies.
const (
	// OneForOne restarts only the child that failed (the default).
	OneForOne Strategy = "OneForOne"
	// AllForOne restarts every controller and webhook when one fails.
	AllForOne Strategy = "AllForOne"
	// RestForOne restarts the child that failed and the controllers and
	// webhooks added after it, in the order they were added.
	RestForOne Strategy = "RestForOne"
)

// Mode is which manager the supervisor runs, and so which phases Start goes
// through.
type Mode uint8

// The modes.
const (
	// ModeBase: pre-flight only; children are plain runnables, only shut down.
	ModeBase Mode = iota
	// ModeControllers: pre-flight, webhooks, election, stores, controllers.
	ModeControllers
	// ModeWebhooks: pre-flight, then every webhook's Start; ready once started.
	ModeWebhooks
)

// Timing is the supervision configuration with every default filled in.
type Timing struct {
	Strategy           Strategy
	MaxRestarts        int           // restarts allowed within RestartWindow
	RestartWindow      time.Duration // also how long a child must run for its backoff to reset
	InitialBackoff     time.Duration
	MaxBackoff         time.Duration
	HealthInterval     time.Duration
	HealthTimeout      time.Duration
	UnhealthyThreshold int
	ShutdownTimeout    time.Duration // bound on Shutdown during restarts, escalation and fencing
}

// DefaultTiming is the Timing of a zero SupervisionSpec.
var DefaultTiming = Timing{
	Strategy:           OneForOne,
	MaxRestarts:        5,
	RestartWindow:      time.Minute,
	InitialBackoff:     100 * time.Millisecond,
	MaxBackoff:         30 * time.Second,
	HealthInterval:     10 * time.Second,
	HealthTimeout:      time.Second,
	UnhealthyThreshold: 3,
	ShutdownTimeout:    30 * time.Second,
}

// Clock is the time the supervisor uses: timers for backoff, tickers for
// probes. Tests inject k8s.io/utils/clock/testing.FakeClock.
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// Config configures a root supervisor.
type Config struct {
	Mode Mode
	// Preflight is the manager's Context.Start; nil means nothing to do.
	Preflight func(ctx context.Context) error
	// Elector is the Props of the elector actor (package lease); nil turns
	// election off.
	Elector *actor.Props
	// Identity is this replica's lease identity, for Status.
	Identity string
	// Shards, when above 1, makes leadership sharded: Elector is then the
	// Props of a lease/shard elector's actor (shard.Props), each controller
	// runs only while this replica holds the Lease of its Spec.Shard, and
	// stores run while it holds at least one shard. 0 or 1 is the single
	// lease of package lease.
	Shards int
	// ShardLease names shard i's Lease, for Status; with Shards > 1.
	ShardLease func(i int) string
	// ShardHolders returns each shard's holder as last observed, for Status;
	// nil leaves the holders out.
	ShardHolders func() []string
	// ShardOf is the shard of the controller named name, for AddChild; with
	// Shards > 1.
	ShardOf func(name string) int
	// FenceTimeout is how long after a lost lease every controller and
	// store must have returned from Shutdown: the time left before another
	// replica may take the lease over, less a margin (lease.Config's
	// FenceTimeout). Their Shutdown contexts end at three quarters of it; at
	// its end, one still shutting down fails the manager at once, with an
	// error wrapping lease.ErrLost, so that the host exits. Zero uses
	// Timing.ShutdownTimeout.
	FenceTimeout time.Duration
	// Guards gives each controller and store incarnation the check behind
	// its lease guard (actors.LeaseGuard); nil with election off.
	Guards actors.Guards
	// Reelect sets what a lost lease does once fenced: false stops the
	// manager, which fails with an error wrapping lease.ErrLost; true sends
	// it back to Electing (webhooks and plain runnables keep running), and
	// once elected again it recovers the stores and runs the controllers
	// afresh.
	Reelect bool
	Timing  Timing
	Logger  *slog.Logger
	Clock   Clock
	// Jitter returns a number in [0, 1) for backoff jitter; nil uses math/rand/v2.
	Jitter func() float64
	// Bus receives the events; Observed the state the facade reads.
	Bus      *Bus
	Observed *Observed
}

func (c *Config) fill() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Bus == nil {
		c.Bus = NewBus(0, c.Logger)
	}
	if c.Observed == nil {
		c.Observed = NewObserved()
	}
	if c.Timing == (Timing{}) {
		c.Timing = DefaultTiming
	}
}
