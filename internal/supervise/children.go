package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// level is one level of supervision: its children in the order they were
// added and the policy (strategy, restart budget, backoff) that decides
// what restarts when one of them fails. The root supervises one level; a
// group (GroupDecl) is one more, a child of its parent's level. Restart
// plans refer to the level they restart in, not to the root.
type level struct {
	s        *root          // the actor that hosts every level
	children []*childRecord // in the order they were added; a group's record stands for it
	policy   Policy
	// initialBackoff and maxBackoff are the level's backoff.
	initialBackoff, maxBackoff time.Duration
	group                      *childRecord // the group this level is; nil at the root
	parent                     *level       // nil at the root
	depth                      int          // 0 at the root
	stopOnExhausted            bool         // ExhaustedStop: a spent budget stops the group
	// storesApart: a failed store restarts alone, whatever the strategy,
	// and no other child's failure restarts one. The root's stores are:
	// the start round recovers them before any controller starts, and a
	// controller's failure does not lose a cache. A group's strategy names
	// its stores with the rest.
	storesApart bool
	// shard, when positive, pins every controller under the level to
	// shard shard-1 (GroupDecl.Shard, inherited by the groups inside).
	shard int
	// shutdownTimeout bounds the Shutdown calls of the stops of its
	// children that the level decides or is asked for: its restarts, and
	// StopChild, RemoveChild and RestartChild of one of them
	// (stopContext). The root's is the manager's ShutdownTimeout; a
	// group's, its own or its parent's.
	shutdownTimeout time.Duration
	// probeTiming is how its hosted children are probed: how often, how long
	// an answer may take, and how many unhealthy answers in a row make a
	// failure. The root's is the manager's Timing; a group's, its own
	// fields or its parent's. nextProbe is when they are due again, and
	// probing that a sweep of them is in flight (onProbeTick).
	probeTiming healthTiming
	nextProbe   time.Time
	probing     bool
	probeTick   uint64 // the prober's tick dueAt judged it at, and its answer
	probeDue    bool
	// ticket is the restart ticket its children get (see ticketFor), made
	// on the first start that needs it.
	ticket *childactor.RestartTicket

	// A group's own state, kept here rather than in every child's record:
	// touched is when a child was last added under it or removed, shown its
	// state as Status last read it and shownAt when (groupSince);
	// exhausted that it was stopped by its spent budget (ExhaustedStop).
	touched   time.Time
	shown     supervisor.ChildState
	shownAt   time.Time
	exhausted bool
}

// childRecord is the supervisor's view of one child. It holds what every
// child needs while it runs; what only a child that has failed, restarted,
// or been waited on twice needs is in its history, allocated on first use
// (hist), and a group's own bookkeeping is in its level (sub). The fields
// are ordered for the least padding: it is 184 bytes, in the 192-byte size
// class (spec.Group, its parent's address, took it from 168), and 10,000
// children are 10,000 records; mind the size class when adding one (the
// next is 208).
type childRecord struct {
	spec  childactor.Spec
	pid   *actor.PID
	state supervisor.ChildState
	since time.Time
	gen   uint64 // the incarnation the child is in (or was last in)
	// startedAt is when the current incarnation started, as the time since
	// the root's epoch (sinceEpoch); set only while started is.
	startedAt time.Duration

	wait *barrier     // the first waiting for this child's next Started/StartFailed/Stopped; more in x.waits
	plan *restartPlan // the restart plan it belongs to, if any
	x    *history     // allocated on first use (hist); nil for a child that never needed it

	lvl *level // the level it is a child of
	sub *level // a group's own level; nil for a hosted component

	healthy       bool
	started       bool // startedAt is set
	stopRequested bool // stopped by StopChild: not supervised until started again
	activeDirty   bool // its activity changed during this message (flushActive)
	// activeObserved is its activity as Observed has it (flushActive).
	activeObserved bool
}

// history is the part of a childRecord that a child which never failed,
// restarted or was waited on by two owners at once does without: it is
// allocated the first time one of its fields is set (childRecord.hist), and
// kept (a child that failed once is likely to fail again).
type history struct {
	lastErr     error  // the last failure
	message     string // the last health message, or the last failure's
	unhealthy   int    // consecutive unhealthy probes
	restarts    int
	failures    int
	backoffStep int
	budget      []time.Time   // restarts within the window
	waits       []*barrier    // waiting besides childRecord.wait, in the order they came
	queued      *childRequest // a group's request that has still to start it (busy meanwhile)
	pipe        *pipedRestart // a restart sent with its Stop, until its Stopped (a restart has a history)
}

// lastErr is rec's last failure, nil if it never failed.
func (rec *childRecord) lastErr() error {
	if rec.x == nil {
		return nil
	}
	return rec.x.lastErr
}

// message is rec's last health message (or failure's), "" if none.
func (rec *childRecord) message() string {
	if rec.x == nil {
		return ""
	}
	return rec.x.message
}

// setMessage sets rec's health message; a healthy child's empty message
// needs no history.
func (rec *childRecord) setMessage(m string) {
	if m == "" && rec.x == nil {
		return
	}
	rec.hist().message = m
}

// unhealthy is how many probes in a row have found rec unhealthy.
func (rec *childRecord) unhealthy() int {
	if rec.x == nil {
		return 0
	}
	return rec.x.unhealthy
}

// resetUnhealthy forgets rec's unhealthy probes.
func (rec *childRecord) resetUnhealthy() {
	if rec.x != nil {
		rec.x.unhealthy = 0
	}
}

// hist returns rec's history, allocating it: for writes.
func (rec *childRecord) hist() *history {
	if rec.x == nil {
		rec.x = &history{}
	}
	return rec.x
}

// restarts is how many times rec has restarted.
func (rec *childRecord) restarts() int {
	if rec.x == nil {
		return 0
	}
	return rec.x.restarts
}

// failures is how many times rec has failed.
func (rec *childRecord) failures() int {
	if rec.x == nil {
		return 0
	}
	return rec.x.failures
}

// budget is rec's restarts within its level's window (some may have left it).
func (rec *childRecord) budget() []time.Time {
	if rec.x == nil {
		return nil
	}
	return rec.x.budget
}

// queued is the group's request that has still to start rec, or nil.
// inPlan reports whether a restart plan in progress holds rec.
func (rec *childRecord) inPlan() bool { return rec.plan != nil && rec.plan.stage != planDone }

func (rec *childRecord) queued() *childRequest {
	if rec.x == nil {
		return nil
	}
	return rec.x.queued
}

// piped is the restart sent with rec's Stop, until its Stopped, or nil.
func (rec *childRecord) piped() *pipedRestart {
	if rec.x == nil {
		return nil
	}
	return rec.x.pipe
}

// setPipe sets the restart sent with rec's Stop (piped); nil allocates nothing.
func (rec *childRecord) setPipe(p *pipedRestart) {
	if p == nil && rec.x == nil {
		return
	}
	rec.hist().pipe = p
}

// waiting reports whether a barrier waits for rec's next report.
func (rec *childRecord) waiting() bool { return rec.wait != nil }

// markStarted notes that rec's current incarnation (or a group's restart)
// started now; clearStarted that none has started since its last start.
func (rec *childRecord) markStarted(c *msgClock) {
	rec.startedAt, rec.started = c.since(c.now()), true
}

func clearStarted(rec *childRecord) { rec.startedAt, rec.started = 0, false }

// owner is an operation in flight that waits on children through a
// barrier: a start round, a restart plan, a fencing (a stand-down too), a shard
// hand-over, a shutdown, a lifecycle request. current is the one check
// that a child's report is still wanted: false once the operation has
// ended, or moved on to a stage that no longer waits for b.
type owner interface {
	current(b *barrier) bool
	settled(b *barrier, err error) // b has settled with err; advance
}

// barrier waits for a set of children to reach their next Started,
// StartFailed or Stopped, then tells its owner once. A child may be waited
// on by several barriers (a StopChild arriving while a restart stops it);
// its next report settles them all. A start that ends in Stopped (it was
// stopped while starting) settles a barrier with errInterrupted.
type barrier struct {
	owner    owner
	left     int
	err      error
	failFast bool // for starts: settle with the first error
	// skipStopped: for a start round, a child stopped while it started
	// (its shard lost or handed over) is left out instead of failing it.
	skipStopped bool
	// supervises: for a start round after the manager has run (its
	// supervised), a child whose start call failed is left out too, and
	// supervised like any failure (onChildStartFailed).
	supervises bool
	done       bool
}

// errInterrupted is the exported sentinel itself, so that the identity
// checks of the start's owners (err != errInterrupted) still hold.
var errInterrupted = supervisor.ErrStartInterrupted

// errRestartedByPlan answers a lifecycle request on a hosted child whose
// start it waited for was cut short by a restart plan of the child's
// level, which starts it again (childRequest.settled).
var errRestartedByPlan = fmt.Errorf("%w: a restart of its group (a sibling's failure, or the group restarted whole) stopped it, and starts it again", errInterrupted)

func (b *barrier) add(rec *childRecord) {
	b.left++
	if rec.wait == nil {
		rec.wait = b
		return
	}
	x := rec.hist()
	x.waits = append(x.waits, b)
}

// settle counts one child's report. A report for an owner that has ended
// or moved on is dropped here, and only here.
func (b *barrier) settle(err error) {
	if b.done {
		return
	}
	if !b.owner.current(b) {
		b.done = true
		return
	}
	b.left--
	if err != nil && b.err == nil {
		b.err = err
	}
	if (b.err != nil && b.failFast) || b.left <= 0 {
		b.done = true
		b.owner.settled(b, b.err)
	}
}

// drop stops b waiting for rec, as if rec had reported without an error:
// b's owner no longer wants rec's report (quiesce took rec out of it).
// Other barriers waiting for rec still do. It reports whether b was
// waiting for rec.
func (b *barrier) drop(rec *childRecord) bool {
	switch x := rec.x; {
	case rec.wait == b:
		rec.wait = nil
		if x != nil && len(x.waits) > 0 {
			rec.wait, x.waits = x.waits[0], x.waits[1:]
		}
	case x != nil && slices.Contains(x.waits, b):
		x.waits = slices.DeleteFunc(x.waits, func(w *barrier) bool { return w == b })
	default:
		return false
	}
	b.settle(nil)
	return true
}

// pending returns b, or nil when it waits for nobody (every child it was
// given had stopped already, or there were none): the owner goes on at once.
func (b *barrier) pending() *barrier {
	if b.left == 0 {
		b.done = true
		return nil
	}
	return b
}

// settleChild settles every barrier waiting on rec with err (a start
// barrier settled by a stop gets errInterrupted instead when interrupted is
// set). It reports whether a barrier that supervises took a failed start
// as settled: the caller supervises rec.
func settleChild(rec *childRecord, err error, interrupted bool) (supervise bool) {
	errFor := func(b *barrier) error {
		if interrupted && b.skipStopped {
			return nil
		}
		if interrupted && b.failFast {
			return errInterrupted
		}
		if err != nil && b.supervises && !b.done && b.owner.current(b) {
			supervise = true // its round still waits for it (not abandoned by a stand-down)
			return nil
		}
		return err
	}
	b := rec.wait
	if b == nil {
		return false
	}
	rec.wait = nil
	var more []*barrier
	if x := rec.x; x != nil && len(x.waits) > 0 {
		more = x.waits
		x.waits = nil
	}
	b.settle(errFor(b))
	for _, b := range more {
		b.settle(errFor(b))
	}
	return supervise
}

// startAll starts recs in parallel with ctx (which carries the start
// deadline, if any) for o: it settles with the first error (failing fast)
// or nil once all have started or been stopped meanwhile (a start round
// goes on without the controllers of a shard lost or handed over while
// they started). It returns nil when there is nothing to start.
func (s *root) startAll(o owner, recs []*childRecord, ctx context.Context) *barrier {
	b := &barrier{owner: o, failFast: true, skipStopped: true}
	for _, rec := range recs {
		b.add(rec)
		s.startChild(rec, ctx, 0)
	}
	return b.pending()
}

// startIncarnation starts a new incarnation of rec for o outside the
// manager's start rounds (restarts, AddChild), on the manager's lifetime
// context and bounded by the start timeout.
func (s *root) startIncarnation(o owner, rec *childRecord) *barrier {
	b := &barrier{owner: o, failFast: true}
	b.add(rec)
	s.startChild(rec, s.lifetime.context(), s.startTimeout)
	return b
}

// startChild sends Start for a new incarnation of rec, its start call on a
// context of its own derived from ctx, bounded by timeout when positive. A
// restart the child has taken already (pipedRestart) is recorded, not sent.
//
// It is the one place a start call is counted: every start call after a
// child's first is a restart, whatever decided it (a restart plan,
// RestartChild, StartChild, a start round after a re-election, a shard
// acquired again), and publishes ChildRestarted, so that Restarts is always
// the number of start calls minus one.
func (s *root) startChild(rec *childRecord, ctx context.Context, timeout time.Duration) {
	again := rec.gen != 0
	p := rec.piped()
	taken := p != nil && p.taken
	if taken {
		rec.setPipe(nil)
		rec.gen = p.start.Gen
		s.reg.seen(rec.gen) // a child restarting itself numbers its incarnation
	} else {
		rec.gen = s.reg.nextGen()
	}
	rec.resetUnhealthy()
	clearStarted(rec)
	s.setState(rec, supervisor.StateStarting)
	if again {
		rec.hist().restarts++
		s.publish(supervisor.ChildRestarted, rec, nil)
	}
	if taken {
		return
	}
	start := childactor.Start{Gen: rec.gen, Ctx: ctx, Timeout: timeout}
	start.Restart, start.Restarts = s.ticketFor(rec)
	if rec.pid == nil {
		rec.pid = s.spawner.Spawn(s.ctx, &rec.spec, &start)
		return
	}
	s.ctx.Send(rec.pid, start)
}

// stopAll shuts down every active child of recs in parallel with ctx for o,
// which is told once all have stopped. Children not active are stopped
// already; it returns nil when none is active.
func (s *root) stopAll(o owner, recs []*childRecord, ctx context.Context) *barrier {
	b := &barrier{owner: o}
	for _, rec := range recs {
		if !rec.state.Active() {
			continue
		}
		b.add(rec)
		switch {
		case rec.state != supervisor.StateStopping:
			s.setState(rec, supervisor.StateStopping)
			if p := rec.piped(); p != nil && p.self {
				continue // it stops itself (RestartTicket)
			}
			stop := childactor.Stop{Ctx: ctx}
			if p := rec.piped(); p != nil && !p.revoked {
				stop.Then = &p.start
			}
			s.ctx.Send(rec.pid, stop)
		case rec.piped() != nil && !rec.piped().revoked:
			// Stopping with a restart sent along (a restart plan's): this
			// stop wants it stopped, so the restart is off.
			s.revoke(rec, ctx)
		}
	}
	return b.pending()
}

// pipedRestart is a restart sent with the Stop of its plan, or of a
// RestartChild or StartChild of the child alone (childactor.Stop.Then;
// pipeRestart makes it): once its Shutdown has returned, the child starts
// the next incarnation on its own, without the round trip of a Stopped and
// a Start through the root. It is only a shortcut: the root records the
// restart when the Stopped comes, as if it had sent the Start then, and any
// later decision to keep the child stopped (a StopChild, a shutdown, a
// plan taking it in) sends a Stop that revokes it.
type pipedRestart struct {
	start   childactor.Start
	revoked bool // a Stop has followed: the child is to stay stopped
	taken   bool // the child has started it (Stopped.Then): startChild records it
	self    bool // the child stopped itself with its ticket: no Stop to send
	// watch watches the Shutdown of a child that stopped itself (self),
	// which no Stop of a plan's carries a watch to (Failed.Watch).
	watch *childactor.ShutdownWatch
}

// ticketFor is the restart ticket (and how many restarts in a row it is
// good for) of rec's next incarnation, or nil. A ticket is the restart
// decider's answer (level.handleFailed) to rec's next failure, given ahead; it is given
// only where that answer is known now and cannot change until the child has
// used it or been sent a Stop (which takes it back): a hosted child not
// under the lease, restarted alone by its level's strategy
// (restartsAlone), with a backoff that does not grow (fixedBackoff) and a
// budget that allows it (restarts only leave the window, and only its own
// restarts enter it, so the budget left now is left then). When the child
// uses it, its Failed goes through handleFailed all the same, which counts and
// publishes the restart and takes the ticket back if it decides otherwise.
// It halves a restart's latency (BenchmarkRestart p50 3.9 us with, 8.7 us
// without): the child needs no round trip through the root.
func (s *root) ticketFor(rec *childRecord) (*childactor.RestartTicket, uint32) {
	lvl := rec.lvl
	if (s.cfg.Elector != nil && fencedKind(rec.spec.Kind)) || !lvl.restartsAlone(rec) || !lvl.fixedBackoff() {
		return nil, 0
	}
	left := lvl.policy.MaxRestarts - len(rec.budget())
	if left <= 0 {
		return nil, 0
	}
	if lvl.ticket == nil {
		lvl.ticket = &childactor.RestartTicket{Backoff: lvl.maxBackoff, Ctx: s.lifetime.context(),
			Timeout: s.startTimeout, ShutdownTimeout: lvl.shutdownTimeout}
	}
	return lvl.ticket, uint32(min(left, 1<<31))
}

// pipes reports whether rec's restart (by a plan of its own, or a
// request on it alone) can travel with its Stop: a hosted child in a
// restart's first stop, not under the lease
// (with election on, whether a fenced child may start again is decided
// when it has stopped, by the lease then: leaseHeld).
func (s *root) pipes(rec *childRecord) bool {
	return rec.piped() == nil && rec.pid != nil &&
		(rec.state == supervisor.StateRunning || rec.state == supervisor.StateFailed) &&
		(s.cfg.Elector == nil || !fencedKind(rec.spec.Kind))
}

// pipeRestart sends rec's next incarnation with the Stop that is about to
// end its current one (pipedRestart), to start once its Shutdown has
// returned and notBefore has passed: a restart plan's of one child, and a
// RestartChild's or StartChild's of a hosted child.
func (s *root) pipeRestart(rec *childRecord, notBefore time.Time) {
	p := &pipedRestart{start: childactor.Start{Gen: s.reg.nextGen(), Ctx: s.lifetime.context(),
		Timeout: s.startTimeout, NotBefore: notBefore}}
	p.start.Restart, p.start.Restarts = s.ticketFor(rec)
	rec.setPipe(p)
}

// revoke tells rec, stopping with a restart sent along, to stay stopped.
func (s *root) revoke(rec *childRecord, ctx context.Context) {
	rec.piped().revoked = true
	s.ctx.Send(rec.pid, childactor.Stop{Ctx: ctx})
}

func (s *root) onChildStarted(m childactor.Started) {
	rec := s.reg.current(m.Name, m.Gen)
	if rec == nil || rec.state != supervisor.StateStarting {
		return
	}
	s.setState(rec, supervisor.StateRunning)
	rec.markStarted(&s.clock)
	rec.healthy = true
	rec.setMessage("")
	s.publish(supervisor.ChildStarted, rec, nil)
	settleChild(rec, nil, false)
	if rec.spec.Kind == actors.KindStore {
		rec.lvl.storeRecovered()
	}
}

func (s *root) onChildStartFailed(m childactor.StartFailed) {
	rec := s.reg.current(m.Name, m.Gen)
	if rec == nil || rec.state != supervisor.StateStarting {
		return
	}
	s.setState(rec, supervisor.StateFailed)
	s.recordFailure(rec, m.Err)
	if rec.waiting() {
		// The owner decides: fail the start, or supervise; a supervised
		// round's barrier leaves it to the decider, as if nobody waited.
		if settleChild(rec, m.Err, false) {
			s.supervise(rec, m.Err)
		}
		return
	}
	s.supervise(rec, m.Err)
}

func (s *root) onChildStopped(m childactor.Stopped) {
	rec := s.reg.current(m.Name, m.Gen)
	if rec == nil || rec.state != supervisor.StateStopping {
		return
	}
	pipe := rec.piped()
	rec.setPipe(nil)
	if m.Err != nil {
		logFailure(s.cfg.Logger, "child panicked in Shutdown", rec, m.Err)
	}
	if m.Then != 0 && (pipe == nil || pipe.revoked || pipe.start.Gen != m.Then) {
		// The child started a restart (sent along, or with its ticket)
		// before the Stop that revoked it came: that Stop now stops the new
		// incarnation, and whoever waits for the child to stop waits for
		// its Stopped.
		s.publish(supervisor.ChildStopped, rec, m.Err)
		s.adoptPiped(rec, m.Then)
		return
	}
	if pipe != nil && m.Then != 0 {
		pipe.taken = true
		rec.setPipe(pipe) // its plan's restart records it (startChild)
	}
	s.setState(rec, supervisor.StateStopped)
	s.publish(supervisor.ChildStopped, rec, m.Err)
	settleChild(rec, nil, true) // a start barrier waiting on it: the start was interrupted
	if p := rec.piped(); p != nil && p.taken {
		// Its plan did not restart it (never expected: whatever takes a
		// child out of its plan revokes the restart first). It runs the
		// new incarnation all the same: count it, and stop it.
		rec.setPipe(nil)
		s.adoptPiped(rec, p.start.Gen)
		s.ctx.Send(rec.pid, childactor.Stop{Ctx: rec.lvl.stopContext()})
	}
}

// adoptPiped records incarnation gen, which the child started on its own
// (pipedRestart), as a restart that is stopping: its Stop is on its way.
func (s *root) adoptPiped(rec *childRecord, gen uint64) {
	rec.gen = gen
	s.reg.seen(gen)
	rec.hist().restarts++
	rec.resetUnhealthy()
	clearStarted(rec)
	s.setState(rec, supervisor.StateStopping)
	s.publish(supervisor.ChildRestarted, rec, nil)
}

func (s *root) onChildFailed(m childactor.Failed) {
	rec := s.reg.current(m.Name, m.Gen)
	if rec == nil || rec.state != supervisor.StateRunning {
		// Stopping: if it restarts itself (Restarting), the Stop sent
		// takes the restart back, or stops it (onChildStopped).
		return
	}
	s.recordFailure(rec, m.Err)
	if m.Restarting {
		// It stops itself and starts again as the plan this failure makes
		// would have it (ticketFor): the plan sends no Stop, and records
		// the restart when the Stopped comes.
		rec.setPipe(&pipedRestart{start: childactor.Start{Gen: m.Gen + 1}, self: true, watch: m.Watch})
	}
	s.supervise(rec, m.Err)
	if p := rec.piped(); p != nil && p.self && rec.plan == nil {
		// Supervision decided otherwise (not expected, see ticketFor):
		// keep it stopped.
		p.revoked = true
		if rec.state == supervisor.StateRunning {
			s.setState(rec, supervisor.StateStopping)
		}
		s.ctx.Send(rec.pid, childactor.Stop{Ctx: rec.lvl.stopContext()})
	}
}

// recordFailure counts and publishes one failure of rec.
func (s *root) recordFailure(rec *childRecord, err error) {
	rec.hist().failures++
	rec.hist().lastErr = err
	rec.healthy = false
	rec.hist().message = err.Error()
	logFailure(s.cfg.Logger, "child failed", rec, err)
	s.publish(supervisor.ChildFailed, rec, err)
}

// logFailure logs a failure of rec once; a panic with its stack, as klog
// and controller-runtime do, since the PanicError's message leaves it out.
func logFailure(log *slog.Logger, msg string, rec *childRecord, err error) {
	var pe *actors.PanicError
	if errors.As(err, &pe) {
		log.Error(msg, "child", rec.spec.Name, "kind", rec.spec.Kind, "err", err,
			"panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return
	}
	log.Error(msg, "child", rec.spec.Name, "kind", rec.spec.Kind, "err", err)
}

// setState moves rec to st; Observed learns of it once the message has
// been handled (flushActive).
func (s *root) setState(rec *childRecord, st supervisor.ChildState) {
	rec.state = st
	rec.since = s.clock.now()
	if !rec.activeDirty { // Observed learns at the flush whether it became active or stopped
		rec.activeDirty = true
		s.out.dirty = append(s.out.dirty, rec)
	}
}

// publish publishes a child event.
func (s *root) publish(t supervisor.EventType, rec *childRecord, err error) {
	s.out.emit(supervisor.Event{Type: t, Time: s.clock.now(), Child: rec.spec.Name, Kind: string(rec.spec.Kind),
		Phase: s.state.phase(), Restarts: rec.restarts(), Err: err})
}

// respond answers a request; a nil requester (a plain Send) gets nothing,
// and a refusal is logged.
func (s *root) respond(to *actor.PID, value any, err error) {
	switch {
	case to != nil:
		s.ctx.Send(to, supervisor.Reply{Value: value, Err: err})
	case err != nil:
		// Sent without waiting for the answer (Send): nobody else hears it.
		s.cfg.Logger.Warn("a lifecycle message was refused", "err", err)
	}
}

// lifecycleRecord checks that a lifecycle message can act now and returns
// the child it names: what names the request ("restart of child \"jobs\""),
// act what it does ("restart"), for the errors.
func (s *root) lifecycleRecord(what, act, name string) (*childRecord, error) {
	if p := s.state.phase(); p != supervisor.PhaseRunning {
		if p.Ended() {
			return nil, fmt.Errorf("%s: %w", what, supervisor.ErrStopped)
		}
		return nil, fmt.Errorf("%s: %w (phase %s)", what, supervisor.ErrNotRunning, p)
	}
	rec, err := s.reg.lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", act, err) // err names the child
	}
	if act != "stop" && act != "removal" {
		// A start by hand that a TreeHook at or above rec refuses (a
		// fleet's Offline member cluster) is answered with its refusal.
		// Inside a stopped group nothing starts but the group.
		var stopped *childRecord // the outermost stopped group above rec
		for x := rec; x != nil; x = x.parent() {
			if h, ok := x.spec.Impl.(TreeHook); ok {
				if refused := h.InTree(TreeStarting, x.spec.Name); refused != nil {
					return nil, fmt.Errorf("%s: %w", what, refused)
				}
			}
			if x != rec && x.stopRequested {
				stopped = x
			}
		}
		if stopped != nil {
			return nil, fmt.Errorf("%s: its group %q is stopped (%w); StartChild(%q) starts it", what, stopped.spec.Name, supervisor.ErrChildStopped, stopped.spec.Name)
		}
	}
	return rec, nil
}

// fencedKind reports whether the lease fences children of kind: controllers
// and stores run only while this replica holds the lease; webhooks and plain
// runnables run on standbys too.
func fencedKind(kind actors.Kind) bool {
	return kind == actors.KindController || kind == actors.KindStore
}

// leaseHeld reports whether rec may run now: election is off, rec is not
// fenced (a webhook, a plain runnable), or this replica holds what fences
// it and is not fencing it: a store, some shard (the single lease being
// the one shard); a controller, its own shard.
func (s *root) leaseHeld(rec *childRecord) bool {
	if s.cfg.Elector == nil || !fencedKind(rec.spec.Kind) {
		return true
	}
	if !s.shards.leader || s.state.standingDown() != nil {
		return false
	}
	if rec.spec.Kind != actors.KindController {
		return true
	}
	sh := s.shards.of(rec)
	return sh.held && sh.release == nil && sh.fencing == nil
}

// shardChild is the scope of a lost or released shard: its controllers.
func shardChild(i int) func(*childRecord) bool {
	return func(r *childRecord) bool { return r.spec.Kind == actors.KindController && r.spec.Shard == i }
}

// The decision "stop supervising what is in progress" is made in one place,
// quiesce, for three callers that differ only in which children it touches:
// a shutdown touches every child, a lost lease only the children the lease
// fences, and StopChild or RemoveChild the one child they name. Whatever a
// quiesce does not touch goes on as before: a webhook backing off when the
// lease is lost still restarts, and a standby's webhooks are still probed.

// everyChild is the scope of a shutdown.
func everyChild(*childRecord) bool { return true }

// fencedChild is the scope of a lost lease.
func fencedChild(rec *childRecord) bool { return fencedKind(rec.spec.Kind) }

// quiesce takes the children that touches selects out of every restart plan
// and puts those backing off in StateStopped, so that nothing restarts them.
// A plan left with no child to restart is cancelled; a plan that also
// restarts children outside the scope (AllForOne after a webhook failed,
// say) goes on for those alone, without waiting for the stop of those
// taken out (letGo): whoever took them out stops them.
func (s *root) quiesce(touches func(*childRecord) bool) {
	var out []*childRecord
	for plan := range s.plans {
		rest := 0
		out = out[:0]
		for _, r := range plan.recs {
			if r.plan != plan {
				continue // restarted already, or taken out before
			}
			if touches(r) {
				r.plan = nil
				out = append(out, r)
				continue
			}
			rest++
		}
		if rest == 0 {
			plan.cancel()
			continue
		}
		for _, r := range out {
			plan.letGo(r)
		}
	}
	for _, rec := range s.reg.children {
		if touches(rec) && rec.state == supervisor.StateBackingOff {
			rec.plan = nil
			s.setState(rec, supervisor.StateStopped)
		}
	}
}
