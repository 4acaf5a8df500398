package childactor

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/actorkube/controllermanager/actors"
	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"
)

// Spec describes one child: its unique name, its kind, and the user's value
// (a Controller, Store, Webhook or Runnable, as Kind says).
type Spec struct {
	Name string
	Kind actors.Kind
	Impl any
	// Shard is the shard a controller is pinned to, with sharded leadership
	// (0 otherwise, and for every other kind): it runs only while this
	// replica holds that shard's Lease.
	Shard int
	// Group is the path of the group the child is in, "" at the root: its
	// parent's address, set by whatever named the child (the facade's
	// specs, AddChild), so that the supervisor places the child in the
	// tree without reading its own path back.
	Group string
}

// Config is what a child actor needs from its manager.
type Config struct {
	Logger *slog.Logger
	Clock  clock.PassiveClock
	// Goroutines lends goroutines to the hosted calls; nil starts a new
	// goroutine for each.
	Goroutines *Goroutines
	// Guards gives controllers and stores their lease guard (LeaseGuard);
	// nil with election off.
	Guards Guards
}

// actorContext is the part of actor.Context the child's handlers use.
type actorContext interface {
	Send(pid *actor.PID, message interface{})
}

// childState is where a child is in its incarnation.
type childState uint8

const (
	stateIdle        childState = iota // nothing started, or stopped and shut down
	stateStarting                      // the start call is running
	stateRunning                       // the start call returned nil
	stateStartFailed                   // the start call failed; Shutdown is still owed
	stateStopping                      // Shutdown is running
)

// child is the actor hosting one Spec. There is one per child of a
// manager, so what most children never need is out of line: the webhook's
// admission state (a webhook's only), what a start or stop overlapping
// another leaves for later (rare), and the Spec itself (the parent's).
type child struct {
	// spec is the parent's Spec of the child (its childRecord's, for the
	// supervisor's children), shared, never changed once spawned.
	spec   *Spec
	cfg    *Config // shared by the siblings: one pointer, not a copy, per child
	system *actor.ActorSystem
	self   *actor.PID
	parent *actor.PID

	gen            uint64
	state          childState
	failedReported bool // Failed already sent for this incarnation
	// restartsLeft is how many more times the child may restart itself with
	// ticket before it must ask (RestartTicket).
	restartsLeft uint32
	cancelStart  context.CancelFunc
	rare         *childRare // allocated the first time one of its fields is set
	// next is the start to run once spawned (Spawner.Spawn), then, while
	// Shutdown runs, the restart to run once it has returned (Stop.Then).
	next   *Start
	ticket *RestartTicket // the running incarnation's, if the parent gave one

	// starting is the start call running; stopping the Shutdown call
	// running or due, for the watches of its Stops (see ShutdownWatch).
	starting, stopping *userCall
	// inc is the running incarnation's reporter and lease guard, the
	// guard ended once its Shutdown has returned.
	inc *incarnation

	health    healthCall
	admission *admissionState // a webhook's admission requests (nil for other kinds): see webhook.go

	// tail is the goroutine of a Shutdown call that has returned, while it
	// delivers stopDone: a start call made meanwhile (a restart taken right
	// after the Shutdown) runs on it once the delivery is done, instead of
	// being handed to another goroutine (see runOnTail).
	tail atomic.Pointer[func()]
	// owed is the Shutdown of a child stopped while starting whose actor
	// was torn down before its start call returned (the parent's deadline
	// passed): whoever takes it (Swap) runs it, the start call's goroutine
	// once the call returns, or the actor's Stopping if it has returned
	// already (see oweShutdown).
	owed atomic.Pointer[func()]
}

// childRare is what a child keeps only when a message overlaps a call in
// flight; once allocated it is kept (a child that needed it may again).
type childRare struct {
	pendingFailure error  // reported while the start call was running
	pendingStart   *Start // a Start received while Shutdown was running
	// stopAfterStart is the context of a Stop that came while the start
	// call ran: its Shutdown runs once the start call has returned.
	stopAfterStart context.Context
}

// later returns c.rare, allocating it: for writes.
func (c *child) later() *childRare {
	if c.rare == nil {
		c.rare = &childRare{}
	}
	return c.rare
}

// newChild returns the actor hosting *spec, which it shares with its
// parent: neither changes it.
func newChild(spec *Spec, cfg *Config, start *Start) *child {
	c := &child{spec: spec, cfg: cfg, next: start}
	if spec.Kind == actors.KindWebhook {
		c.admission = &admissionState{}
	}
	return c
}

// tailFree marks child.tail as a goroutine free to take the next call.
var tailFree = func() {}

// runOnTail runs fn on the goroutine of the Shutdown that has just
// returned, if it is still delivering its stopDone (it runs fn after), and
// reports whether it did. Once the Shutdown has returned any start call may
// run, on any goroutine: the hand-over only spares one goroutine switch.
func (c *child) runOnTail(fn func()) bool {
	return c.tail.CompareAndSwap(&tailFree, &fn)
}

// childMailbox is the children's mailbox: it runs on the goroutine that
// posts to it and holds no queue while idle (see inlineMailbox).
var childMailbox = actor.WithMailbox(newInlineMailbox)

// filled returns a copy of cfg with its defaults, for children to share.
func (cfg Config) filled() *Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &cfg
}

// Spawner spawns the child actors of one parent with one shared Props: a
// Props per child (and its producer closure) is a third of what spawning
// costs. Use it only from the parent's Receive, one Spawn at a time.
//
// A child's Receive never blocks (user calls run in goroutines of their
// own), so its mailbox (inlineMailbox) runs on the goroutine that posts to
// it instead of a new goroutine per burst of messages: a health sweep's
// queries cost no goroutine at all (the calls run on the sweep's workers).
// The mailbox still runs one message at a time, in order.
//
// The parent must not let protoactor restart its children (give its own
// Props a strategy that stops them): the shared producer hands out the
// child being spawned, and an actor that does nothing otherwise.
type Spawner struct {
	cfg   *Config
	props *actor.Props
	next  *child
}

// NewSpawner returns a Spawner whose children use cfg.
func NewSpawner(cfg Config) *Spawner {
	s := &Spawner{cfg: cfg.filled()}
	s.props = actor.PropsFromProducer(func() actor.Actor {
		if c := s.next; c != nil {
			s.next = nil
			return c
		}
		return orphan{}
	}, childMailbox)
	return s
}

// Spawn spawns a child hosting *spec under the parent whose context ctx is;
// the child's id starts with its name. The child keeps spec, not a copy:
// the parent must not change it afterwards. With a start, the child runs it
// as soon as it is spawned, as if sent right after, but without the message.
func (s *Spawner) Spawn(ctx actor.SpawnerContext, spec *Spec, start *Start) *actor.PID {
	s.next = newChild(spec, s.cfg, start)
	return ctx.SpawnPrefix(s.props, spec.Name)
}

// orphan is what the shared producer returns outside Spawn (a restart by
// protoactor, which the parent's strategy forbids): it does nothing.
type orphan struct{}

func (orphan) Receive(actor.Context) {}

// Receive handles one message. It never blocks: user calls run in goroutines
// started here, and their results come back as messages.
func (c *child) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.system, c.self, c.parent = ctx.ActorSystem(), ctx.Self(), ctx.Parent()
		if m := c.next; m != nil {
			c.next = nil
			c.start(ctx, *m)
		}
	case Start:
		c.start(ctx, m)
	case startDone:
		c.startDone(ctx, m)
	case Stop:
		c.stop(ctx, m)
	case stopDone:
		c.stopDone(ctx, m)
	case HealthQuery:
		c.queryHealth(m)
	case reported:
		c.reported(ctx, m)
	case callFailed:
		c.callFailed(ctx, m)
	case *AdmissionCall:
		c.admit(m)
	case *actor.Stopping:
		// The tree is being torn down; end any start call still waiting on
		// its context. Shutdown is the parent's business and has already
		// happened (or was abandoned by the parent's deadline).
		if c.cancelStart != nil {
			c.cancelStart()
		}
		c.oweShutdown()
		c.inc.end()
	}
}

// oweShutdown: the actor is torn down while a Shutdown waits for its start
// call (stopped while starting, and the parent gave up waiting: a failed
// Start's shutdown past ShutdownTimeout). startDone will not be delivered,
// but what the start call began is still owed its Shutdown: it runs once
// the call returns, on the call's goroutine, or now on a goroutine of its
// own if the call has returned already. Either side takes it with Swap, so
// it runs once.
func (c *child) oweShutdown() {
	r, call, starting := c.rare, c.stopping, c.starting
	if r == nil || r.stopAfterStart == nil || call == nil || starting == nil {
		return
	}
	shutdown, ok := c.spec.Impl.(actors.Runnable)
	if !ok {
		return
	}
	stopCtx, kind, name, log := r.stopAfterStart, c.spec.Kind, c.spec.Name, c.cfg.Logger
	r.stopAfterStart = nil
	run := func() {
		var err error
		call.run(func() {
			err = Call(kind, name, "Shutdown", func() error { shutdown.Shutdown(stopCtx); return nil })
		})
		if err != nil { // a panic: no parent is left to hear of it
			log.Error("Shutdown after the manager stopped failed", "child", name, "err", err)
		}
	}
	c.owed.Store(&run)
	if starting.returned.Load() {
		if owed := c.owed.Swap(nil); owed != nil {
			go (*owed)()
		}
	}
}

func (c *child) start(ctx actor.Context, m Start) {
	if c.state == stateStopping {
		c.later().pendingStart = &m
		return
	}
	if c.state != stateIdle {
		// Only the parent sends Start, and only to an idle child; anything
		// else is a bug in the parent. Say so rather than start twice.
		ctx.Send(c.parent, StartFailed{Name: c.spec.Name, Gen: m.Gen, Err: errStartWhileActive(*c.spec)})
		return
	}
	c.gen = m.Gen
	c.failedReported = false
	if c.rare != nil {
		c.rare.pendingFailure = nil
	}
	c.ticket, c.restartsLeft = m.Restart, m.Restarts

	op, fn := c.startCall()
	if fn == nil { // a plain runnable has nothing to start
		c.state = stateRunning
		ctx.Send(c.parent, Started{Name: c.spec.Name, Gen: m.Gen})
		return
	}
	c.state = stateStarting
	base := m.Ctx
	if base == nil {
		base = context.Background()
	}
	// Every start call has a context of its own, so that a Stop can end
	// it without ending its siblings' (they may share base).
	var runCtx context.Context
	var cancel context.CancelFunc
	if m.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(base, m.Timeout)
	} else {
		runCtx, cancel = context.WithCancel(base)
	}
	c.cancelStart = cancel
	gen, self, system := m.Gen, c.self, c.system
	c.inc.end()
	c.inc = newIncarnation(c, gen, c.cfg.Guards)
	runCtx = c.inc.with(runCtx)
	clk := c.cfg.Clock
	call := newUserCall(*c.spec, op)
	c.starting = call
	run := func() {
		begin := clk.Now()
		var err error
		call.run(func() { err = Call(c.spec.Kind, c.spec.Name, op, func() error { return fn(runCtx) }) })
		system.Root.Send(self, startDone{gen: gen, took: clk.Since(begin), err: err})
		if owed := c.owed.Swap(nil); owed != nil {
			(*owed)() // the actor is gone: startDone was not delivered
		}
	}
	if !c.runOnTail(run) {
		c.cfg.Goroutines.GoDeep(run)
	}
}

func (c *child) startDone(ctx actor.Context, m startDone) {
	if r := c.rare; m.gen == c.gen && r != nil && r.stopAfterStart != nil {
		// Stopped while starting: now that the start call has returned,
		// its Shutdown runs, and Stopped reports the outcome.
		stopCtx := r.stopAfterStart
		r.stopAfterStart = nil
		c.starting = nil
		c.runShutdown(stopCtx, c.stopping)
		return
	}
	if m.gen != c.gen || c.state != stateStarting {
		return
	}
	c.starting = nil
	c.cancelStart()
	c.cancelStart = nil
	if m.err != nil {
		c.state = stateStartFailed
		ctx.Send(c.parent, StartFailed{Name: c.spec.Name, Gen: m.gen, Err: m.err})
		return
	}
	c.state = stateRunning
	ctx.Send(c.parent, Started{Name: c.spec.Name, Gen: m.gen, Took: m.took})
	if r := c.rare; r != nil && r.pendingFailure != nil {
		c.fail(ctx, r.pendingFailure)
	}
}

func (c *child) stop(ctx actorContext, m Stop) {
	c.ticket = nil // stopped by the parent: it decides what follows
	switch c.state {
	case stateStopping:
		// Shutdown runs once per incarnation; its Stopped answers this Stop
		// too, and this Stop's watch watches it as well. The child is to stay
		// stopped: a restart decided with the first Stop is off.
		c.next = nil
		watchOf(m.Ctx).add(c.stopping)
		return
	case stateIdle:
		ctx.Send(c.parent, Stopped{Name: c.spec.Name, Gen: c.gen})
		return
	}
	stopCtx := m.Ctx
	if stopCtx == nil {
		stopCtx = context.Background()
	}
	call := newUserCall(*c.spec, "Shutdown")
	starting := c.state == stateStarting
	if starting {
		// Set before the call is published to the watch, which reads it
		// from the waiter's goroutine: a call is never changed once
		// published.
		call.waitsFor = c.starting
	}
	c.stopping = call
	c.next = m.Then
	watchOf(stopCtx).handOut(call)
	c.state = stateStopping
	if starting {
		// The start call's context is cancelled, and Shutdown waits for the
		// call to return (startDone): it never runs before or beside the Run
		// (Recover, Start) it ends, which could otherwise start work after
		// its Shutdown that nothing would ever stop. This holds on every
		// path (a manager's shutdown during its own start, a lost lease, a
		// restart): Stopped, and so the lease's release, waits too.
		c.cancelStart()
		c.cancelStart = nil
		c.later().stopAfterStart = stopCtx
		return
	}
	c.runShutdown(stopCtx, call)
}

// runShutdown runs the incarnation's Shutdown (call) in a goroutine of its
// own; stopDone reports its return.
func (c *child) runShutdown(stopCtx context.Context, call *userCall) {
	// The incarnation's guard ends the moment its Shutdown returns, on the
	// Shutdown's own goroutine: not only once the actor has heard of it, so
	// that no write of a worker Shutdown left behind passes in between.
	guard := c.inc
	shutdown, ok := c.spec.Impl.(actors.Runnable)
	if !ok { // a store that is not a Runnable has nothing to shut down
		call.exit()
		guard.end()
		c.system.Root.Send(c.self, stopDone{gen: c.gen})
		return
	}
	gen, self, system, clk := c.gen, c.self, c.system, c.cfg.Clock
	var calls *sync.WaitGroup
	if a := c.admission; a != nil && a.runs != nil && a.gen == c.gen {
		// A webhook's Handle calls of this incarnation whose answers are
		// still awaited: every stop (a restart's, StopChild's,
		// RemoveChild's, ShutdownAndWait's) waits for them, within a bound
		// (drainAdmissions), before Shutdown, which must not free what a
		// running Handle uses. New requests are refused 503 meanwhile (the
		// child is stopping). Inline, not a function of its own: it is on
		// the path of every child's stop (docs/architecture.md's walks).
		calls = &a.runs.calls
	}
	c.cfg.Goroutines.GoDeep(func() {
		begin := clk.Now()
		var err error
		call.run(func() {
			if calls != nil {
				drainAdmissions(stopCtx, calls)
			}
			err = Call(c.spec.Kind, c.spec.Name, "Shutdown", func() error {
				shutdown.Shutdown(stopCtx)
				return nil
			})
		})
		guard.end()
		c.tail.Store(&tailFree)
		system.Root.Send(self, stopDone{gen: gen, took: clk.Since(begin), err: err})
		if next := c.tail.Swap(nil); next != nil && next != &tailFree {
			(*next)() // the start call made while stopDone was delivered
		}
	})
}

func (c *child) stopDone(ctx actor.Context, m stopDone) {
	if m.gen != c.gen || c.state != stateStopping {
		return
	}
	c.state = stateIdle
	c.stopping = nil
	c.inc.end()
	then := c.next
	c.next = nil
	if then != nil && c.cfg.Clock.Now().Before(then.NotBefore) {
		then = nil // still backing off: the parent starts it when due
	}
	stopped := Stopped{Name: c.spec.Name, Gen: m.gen, Took: m.took, Err: m.err}
	if then != nil {
		stopped.Then = then.Gen
	}
	ctx.Send(c.parent, stopped)
	if then != nil {
		c.start(ctx, *then)
		return
	}
	if r := c.rare; r != nil && r.pendingStart != nil {
		p := r.pendingStart
		r.pendingStart = nil
		c.start(ctx, *p)
	}
}

func (c *child) reported(ctx actor.Context, m reported) {
	if m.gen != c.gen {
		return // a report of an incarnation that is gone
	}
	err := reportedError(c.spec.Kind, c.spec.Name, m.err)
	switch c.state {
	case stateStarting:
		if r := c.later(); r.pendingFailure == nil {
			r.pendingFailure = err
		}
	case stateRunning:
		c.fail(ctx, err)
	}
}

// fail reports the first failure of a running incarnation to the parent.
// With a ticket (RestartTicket) the child restarts at once, as if the
// parent had answered with a Stop carrying the restart, and says so.
func (c *child) fail(ctx actorContext, err error) {
	if c.failedReported {
		return
	}
	c.failedReported = true
	t := c.ticket
	c.ticket = nil
	if t == nil || c.restartsLeft == 0 || c.state != stateRunning {
		ctx.Send(c.parent, Failed{Name: c.spec.Name, Gen: c.gen, Err: err})
		return
	}
	watch := NewShutdownWatch()
	ctx.Send(c.parent, Failed{Name: c.spec.Name, Gen: c.gen, Err: err, Restarting: true, Watch: watch})
	stopCtx, cancel := context.WithTimeout(context.Background(), t.ShutdownTimeout)
	_ = cancel // released when the deadline passes, as the parent's own stops are
	c.stop(ctx, Stop{Ctx: WithShutdownWatch(stopCtx, watch), Then: &Start{Gen: c.gen + 1, Ctx: t.Ctx, Timeout: t.Timeout,
		NotBefore: c.cfg.Clock.Now().Add(t.Backoff), Restart: t, Restarts: c.restartsLeft - 1}})
}

// startCall returns the user call that starts this child's kind, or a nil
// function when there is nothing to start.
func (c *child) startCall() (op string, fn func(context.Context) error) {
	switch c.spec.Kind {
	case actors.KindController:
		return "Run", c.spec.Impl.(actors.Controller).Run
	case actors.KindStore:
		return "Recover", c.spec.Impl.(actors.Store).Recover
	case actors.KindWebhook:
		return "Start", c.spec.Impl.(actors.Webhook).Start
	}
	return "", nil
}
