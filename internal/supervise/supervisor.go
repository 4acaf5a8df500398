package supervise

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
	"weak"

	"github.com/actorkube/controllermanager/internal/elector"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// idleGoroutines is how many goroutines the children's user calls leave
// waiting for the next call: enough to absorb a burst of calls that return
// at once (a start or shutdown of thousands of children), few enough to
// cost nothing worth counting while idle.
const idleGoroutines = 64

// Facade plumbing: Handle is a spawned root supervisor and what its facade reads.
type Handle struct {
	PID      *actor.PID
	System   *actor.ActorSystem
	Observed *Observed
	Bus      *Bus
}

// Facade plumbing: Spawn starts a root supervisor in phase Idle as a
// top-level actor of system, named name.
func Spawn(system *actor.ActorSystem, name string, cfg Config) (*Handle, error) {
	cfg.fill()
	s := &root{cfg: cfg, obs: cfg.Observed, state: idlePhase{}, out: outbox{bus: cfg.Bus, obs: cfg.Observed},
		tree: &level{policy: cfg.Policy, initialBackoff: cfg.Timing.InitialBackoff, maxBackoff: cfg.Timing.MaxBackoff, storesApart: true,
			shutdownTimeout: cfg.Timing.ShutdownTimeout,
			probeTiming:     healthTiming{interval: cfg.Timing.HealthInterval, timeout: cfg.Timing.HealthTimeout, threshold: cfg.Timing.UnhealthyThreshold}},
		clock: msgClock{clock: cfg.Clock}, self: &mailbox{},
		goroutines: childactor.NewGoroutines(idleGoroutines)}
	s.tree.s = s
	s.probe = prober{clock: cfg.Clock, interval: cfg.Timing.HealthInterval, tick: s.self.after(func() any { return probeTick{} })}
	s.shards = newShardTable(&cfg)
	s.spawner = childactor.NewSpawner(childactor.Config{Logger: cfg.Logger, Clock: cfg.Clock, Goroutines: s.goroutines, Guards: cfg.Guards})
	// protoactor never restarts a child on its own: supervision is the
	// root's own code, and a child's Receive runs no user code that could
	// panic. Should one crash anyway, it is stopped, and the root fails.
	props := actor.PropsFromProducer(func() actor.Actor { return s }, actor.WithSupervisor(stopCrashedChild))
	pid, err := system.Root.SpawnNamed(props, name)
	if err != nil {
		return nil, fmt.Errorf("supervisor: cannot spawn %q: %w", name, err)
	}
	return &Handle{PID: pid, System: system, Observed: cfg.Observed, Bus: cfg.Bus}, nil
}

// root is the root supervisor actor. All its fields are owned by Receive.
type root struct {
	cfg  Config
	obs  *Observed
	ctx  actor.Context // the context of the message being handled
	self *mailbox      // its address, from any goroutine

	state phaseState // the phase and the operations it owns: made only by become
	tree  *level     // the root's level: its children, its strategy and budget
	reg   registry   // every record, by path; the hosted children in the order added

	out outbox // what the message being handled publishes once handled

	startTimeout time.Duration             // bounds every start call, restarts included
	plans        map[*restartPlan]struct{} // in flight, in every level
	requests     requestSet                // lifecycle requests in flight (RestartChild, StartChild, AddChild)
	probe        prober

	lifetime lifetime // ends when the manager shuts down

	goroutines *childactor.Goroutines // lent to the children's user calls
	spawner    *childactor.Spawner

	elector *actor.PID
	shards  shardTable // what this replica holds of the lease (the single lease is shard 0)

	terminated bool

	clock msgClock // read once per message
}

// Receive handles one message. It never blocks: user calls run in the child
// actors, waits in goroutines that send a message back.
func (s *root) Receive(ctx actor.Context) {
	s.ctx = ctx
	s.clock.next()
	defer s.out.flush()
	defer s.publishNames() // before the events: a subscriber told of an added child finds it named
	defer func() {
		if r := recover(); r != nil {
			s.internalError(fmt.Errorf("supervisor: internal error while handling %T: %v", ctx.Message(), r), debug.Stack())
		}
	}()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self.pid, s.self.system = ctx.Self(), ctx.ActorSystem()
	case *actor.Terminated:
		s.onTerminated(m)
	case *actor.Stopped:
		if !s.terminated {
			s.terminated = true
			s.goroutines.Close()
			close(s.obs.terminated)
		}

	case StartManager:
		s.onStartManager(m, ctx.Sender())
	case supervisor.ShutdownManager:
		s.onShutdownManager(m, ctx.Sender())
	case GatherHealth:
		s.onGatherHealth(m)
	case supervisor.GetStatus:
		s.respond(ctx.Sender(), s.status(), nil)
	case supervisor.RestartChild:
		s.onRestartChild(m, ctx.Sender())
	case supervisor.StopChild:
		s.onStopChild(m, ctx.Sender())
	case supervisor.StartChild:
		s.onStartChild(m, ctx.Sender())
	case supervisor.AddChild:
		s.onAddChild(m, ctx.Sender())
	case supervisor.RemoveChild:
		s.onRemoveChild(m, ctx.Sender())
	case childNamed:
		s.onChildNamed(m)

	case childactor.Started:
		s.onChildStarted(m)
	case childactor.StartFailed:
		s.onChildStartFailed(m)
	case childactor.Stopped:
		s.onChildStopped(m)
	case childactor.Failed:
		s.onChildFailed(m)

	case elector.Acquired:
		s.onShardAcquired(m)
	case elector.HolderChanged:
		s.shards.observed(m.Shard, m.Identity) // who holds it, for Status
	case elector.Releasing:
		s.onShardReleasing(m)
	case elector.Lost:
		s.onShardLost(m)
	case elector.Released:
		s.onLeaseReleased()
	case fenceOverdue:
		m.f.overdue()
	case shutdownOverdue:
		s.state.shutdown().onOverdue()
	case shutdownReport:
		m.attempt.onReport(m.stuck)

	case preflightDone:
		m.attempt.preflightDone(m.err)
	case startExpired:
		m.attempt.expired(m.err)
	case restartDue:
		m.plan.backoffPassed()
	case stopOverdue:
		m.plan.shutdownOverdue()
	case stopStuck:
		m.plan.onStuck(m.stuck)
	case probeTick:
		s.onProbeTick()
	case probeDone:
		s.onProbeDone(m)
	case *actor.DeadLetterResponse:
		// A reply to a requester that had given up; nothing to do.
	default:
		// A request the supervisor does not know (a pointer to a lifecycle
		// message, say) is answered, so that its sender does not wait in vain.
		if sender := ctx.Sender(); sender != nil {
			s.respond(sender, nil, fmt.Errorf("%w: %T", supervisor.ErrUnknownMessage, m))
		}
	}
	s.checkOps()
}

// outbox is what a message's handling tells the world once it has been
// handled (flush): the events, in order, and the children that became
// active or stopped, for Observed. Receive flushes it after every message.
type outbox struct {
	bus      *Bus
	obs      *Observed
	events   []supervisor.Event
	dirty    []*childRecord // whose activity Observed learns of at the flush
	closeBus bool           // the manager has stopped: the bus closes after the events
}

// emit queues e.
func (o *outbox) emit(e supervisor.Event) { o.events = append(o.events, e) }

// flush tells Observed which children became active or stopped while the
// message was handled, then publishes the message's events in order.
func (o *outbox) flush() {
	o.flushActive()
	for i, e := range o.events {
		o.bus.Publish(e)
		o.events[i] = supervisor.Event{}
	}
	o.events = trimmed(o.events)
	if o.closeBus {
		o.closeBus = false
		o.bus.Close()
	}
}

// flushActive tells Observed which children became active or stopped.
func (o *outbox) flushActive() {
	for i, rec := range o.dirty {
		rec.activeDirty = false
		if active := rec.state.Active(); active != rec.activeObserved {
			rec.activeObserved = active
			o.obs.setActive(&rec.spec, active)
		}
		o.dirty[i] = nil
	}
	o.dirty = trimmed(o.dirty)
}

// keptQueue is the largest queue (events, dirty records) kept for the next
// message: a message that touches every child (a start round, a shutdown)
// queues one entry per child, and keeping that array would cost every idle
// child a pointer or an Event for as long as the manager runs.
const keptQueue = 64

// trimmed empties q for the next message, keeping its array only if small.
func trimmed[T any](q []T) []T {
	if cap(q) > keptQueue {
		return nil
	}
	return q[:0]
}

// internalError handles a panic in the supervisor's own code: the manager
// cannot be trusted to supervise any more, so it shuts down and fails.
func (s *root) internalError(err error, stack []byte) {
	s.cfg.Logger.Error("supervisor failed", "err", err, "stack", string(stack))
	if s.ending() {
		return
	}
	func() {
		defer func() { _ = recover() }() // a second panic must not take the process down
		s.beginShutdown(err, s.cfg.boundedContext())
	}()
}

// mailbox is the supervisor's own address, known once it has started: how
// its goroutines, its timers and its contexts' callbacks send it a message.
// Only the root holds it.
type mailbox struct {
	system *actor.ActorSystem
	pid    *actor.PID
}

// send sends msg to the supervisor itself from any goroutine.
func (b *mailbox) send(msg any) { b.system.Root.Send(b.pid, msg) }

// after returns a timer's function that sends the message msg returns to
// the supervisor. It holds the mailbox weakly, and so the supervisor: Stop
// leaves a timer in the runtime's timer heap until it would have fired
// (longer, while other timers are pending), and a closure holding the
// mailbox would keep a stopped manager's actor system alive that long. msg
// returns nil when what it refers to is gone.
func (b *mailbox) after(msg func() any) func() {
	w := weak.Make(b)
	return func() {
		if b := w.Value(); b != nil {
			if m := msg(); m != nil {
				b.send(m)
			}
		}
	}
}

// boundedContext is the context for Shutdown calls the supervisor decides on
// by itself (restarts, escalation): bounded by Timing.ShutdownTimeout.
func (c *Config) boundedContext() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timing.ShutdownTimeout)
	_ = cancel // released when the deadline passes; the children hold it until then
	return ctx
}

func (s *root) status() supervisor.Status {
	if final, ok := s.obs.Final(); ok {
		return final
	}
	st := supervisor.Status{Phase: s.state.phase(), Leader: s.shards.leader, Identity: s.cfg.Identity, LeaderIdentity: s.shards.holder}
	st.Shards = s.shards.status(s.reg.children)
	st.Children = s.tree.status(s.clock.now())
	return st
}

// stopCrashedChild is the root's protoactor strategy for its children: stop
// a child whose Receive panicked (a bug of this package; user code never
// runs there) instead of restarting it with a lost state.
var stopCrashedChild = actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })

// onTerminated notices a child actor that stopped although the root did
// not stop it: that is a crash of its Receive, and the manager cannot
// supervise that child any more, so it fails.
func (s *root) onTerminated(m *actor.Terminated) {
	if s.state.phase().Ended() {
		return // the tree is being torn down
	}
	for _, rec := range s.reg.children {
		if rec.pid != nil && rec.pid.Equal(m.Who) {
			s.internalError(fmt.Errorf("supervisor: the actor of %s %q stopped unexpectedly", rec.spec.Kind, rec.spec.Name), nil)
			return
		}
	}
}

// msgClock is the supervisor's reading of its clock: once per message, so
// that a message touching every child (a start, a shutdown) reads the clock
// once, not a few times per child; and the epoch a record keeps its times
// from (since).
type msgClock struct {
	clock    Clock
	at       time.Time // the reading for the message being handled
	valid    bool
	epoch    time.Time
	epochSet bool
}

// next forgets the reading: a new message is handled.
func (c *msgClock) next() { c.valid = false }

// now is the time of the message being handled.
func (c *msgClock) now() time.Time {
	if !c.valid {
		c.at, c.valid = c.clock.Now(), true
	}
	return c.at
}

// since is t as a duration since the epoch, the first time it was asked
// for: 8 bytes in a record where a time.Time is 24. The epoch is a reading
// of the same clock, so the difference of two such durations is that of
// the times (monotonic, with a real clock).
func (c *msgClock) since(t time.Time) time.Duration {
	if !c.epochSet {
		c.epoch, c.epochSet = t, true
	}
	return t.Sub(c.epoch)
}
