package supervise

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/supervisor"
)

// Facade plumbing: Mode is which manager the supervisor runs, and so which phases Start goes
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

// Facade plumbing: Policy is which children restart when one fails and how
// often they may: the strategy and the restart budget (users set them in a
// SupervisionSpec of the root package). Config fills each zero field with
// its default (internal/defaults, listed in docs/defaults.md) on its own.
type Policy struct {
	Strategy      supervisor.Strategy
	MaxRestarts   int           // restarts allowed within RestartWindow
	RestartWindow time.Duration // also how long a child must run for its backoff to reset
}

// Facade plumbing: DefaultPolicy is the Policy of a zero SupervisionSpec,
// every field its default.
func DefaultPolicy() Policy { return Policy{}.withDefaults() }

// withDefaults is p with each zero field set to its default.
func (p Policy) withDefaults() Policy {
	if p.Strategy == "" {
		p.Strategy = supervisor.Strategy(defaults.Strategy)
	}
	if p.MaxRestarts == 0 {
		p.MaxRestarts = defaults.MaxRestarts
	}
	if p.RestartWindow == 0 {
		p.RestartWindow = defaults.RestartWindow
	}
	return p
}

// Facade plumbing: Timing is the supervisor's timing (users set it in a
// SupervisionSpec of the root package): backoff, health probes and the
// Shutdown bound. Config fills each zero field with its default
// (internal/defaults, listed in docs/defaults.md) on its own, so a Timing
// that sets only some fields keeps them.
type Timing struct {
	InitialBackoff     time.Duration
	MaxBackoff         time.Duration
	HealthInterval     time.Duration
	HealthTimeout      time.Duration
	UnhealthyThreshold int           // unhealthy or silent probes in a row that make a failure
	ShutdownTimeout    time.Duration // bound on Shutdown during restarts, escalation and fencing
}

// Facade plumbing: DefaultTiming is the Timing of a zero SupervisionSpec,
// every field its default, which the root package validates a
// SupervisionSpec against.
func DefaultTiming() Timing { return Timing{}.withDefaults() }

// withDefaults is t with each zero field set to its default. With
// Policy.withDefaults it is the one place the supervisor's defaults are
// filled.
func (t Timing) withDefaults() Timing {
	fill := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if t.UnhealthyThreshold == 0 {
		t.UnhealthyThreshold = defaults.UnhealthyThreshold
	}
	fill(&t.InitialBackoff, defaults.InitialBackoff)
	fill(&t.MaxBackoff, defaults.MaxBackoff)
	fill(&t.HealthInterval, defaults.HealthInterval)
	fill(&t.HealthTimeout, defaults.HealthTimeout)
	fill(&t.ShutdownTimeout, defaults.ShutdownTimeout)
	return t
}

// Clock is the time the supervisor uses: timers for backoff, tickers for
// probes. Tests inject k8s.io/utils/clock/testing.FakeClock.
// It is k8s.io/utils/clock's WithTickerAndDelayedExecution, so that the
// facade's WithClock names a public type.
type Clock = clock.WithTickerAndDelayedExecution

// Facade plumbing: Config configures a root supervisor (Spawn).
type Config struct {
	Mode Mode
	// Preflight is the manager's Context.Start; nil means nothing to do.
	Preflight func(ctx context.Context) error
	// Elector is the Props of the elector actor (internal/elector.New);
	// nil turns election off.
	Elector *actor.Props
	// Identity is this replica's lease identity, for Status.
	Identity string
	// Shards, when above 1, makes leadership sharded: each controller runs
	// only while this replica holds the Lease of its Spec.Shard, and stores
	// run while it holds at least one shard. 0 or 1 is one Lease (the same
	// elector with a single shard).
	Shards int
	// ShardLease names shard i's Lease, for Status; with Shards > 1.
	ShardLease func(i int) string
	// ShardHolders returns each shard's holder as last observed, for Status;
	// nil leaves the holders out.
	ShardHolders func() []string
	// ShardOf is the shard of the controller named name, for AddChild; with
	// Shards > 1.
	ShardOf func(name string) int
	// Tree, for AddChild, reports whether v is a group
	// (controllermanager.NewGroup) and gives its values for Specs, at path
	// parent: its GroupDecl first, then its children in InGroups, depth
	// first. nil: no value is a group.
	Tree func(parent string, v any) ([]any, bool)
	// FenceTimeout is how long after a lost lease every controller and
	// store must have returned from Shutdown: the time left before another
	// replica may take the lease over, less a margin (lease/shard's
	// FenceTimeout). Their Shutdown contexts end at three quarters of it; at
	// its end, one still shutting down fails the manager at once, with an
	// error wrapping lease.ErrLost, so that the host exits. Zero uses
	// Timing.ShutdownTimeout.
	FenceTimeout time.Duration
	// Guards gives each controller and store incarnation the check behind
	// its lease guard (actors.LeaseGuard); nil with election off.
	Guards childactor.Guards
	// Reelect sets what a lost lease does once fenced: false stops the
	// manager, which fails with an error wrapping lease.ErrLost; true sends
	// it back to Electing (webhooks and plain runnables keep running), and
	// once elected again it recovers the stores and runs the controllers
	// afresh.
	Reelect bool
	Policy  Policy
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
	c.Policy = c.Policy.withDefaults()
	c.Timing = c.Timing.withDefaults()
}
