package supervise

import (
	"context"
	"fmt"
	"slices"
	"time"
	"weak"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// A restart, followed from its message: RestartChild or StartChild (here)
// checks the child and makes a childRequest; a failure (children.go: a
// child's report) makes a restartPlan (supervise). Either stops the
// children through a barrier (children.go), then starts them again with
// startIncarnation; startChild (children.go), the one way any start call
// is sent, counts every one after a child's first as a restart. The
// child's actor (internal/childactor/child.go) makes the calls, on a
// goroutine of goroutines.go through unstopped.go's userCall and errors.go's
// Call, and reports back (Stopped, Started) to children.go; the owner the
// barrier calls back (settled) is the childRequest or restartPlan here.
// docs/architecture.md, "Walking one restart", lists every stop.

// planStage is where a restart plan is, in this order.
type planStage uint8

const (
	planStopping   planStage = iota // its children are shutting down together
	planBackingOff                  // all have stopped; waiting for the backoff to pass
	planStarting                    // started again one after another, in the order added
	planDone                        // every child has started, or the plan was cancelled
)

var planStageNames = [...]string{"stopping", "backing off", "starting", "done"}

func (st planStage) String() string { return planStageNames[st] }

// planMoves is every move of a restart plan's stage: down the stages in
// order, or to done from any (cancelled: cancel).
var planMoves = map[planStage][]planStage{
	planStopping:   {planBackingOff, planDone},
	planBackingOff: {planStarting, planDone},
	planStarting:   {planDone},
	planDone:       nil,
}

// become is the one way a plan's stage moves (moveStage).
func (p *restartPlan) become(to planStage) {
	p.stage = moveStage("restart plan", p.stage, to, planMoves)
}

// moveStage is the transition check of every operation (start round,
// shutdown, fencing, shard hand-over, restart plan, lifecycle request,
// stop for good): from to to must be a move legal lists; staying put is nothing;
// any other move is a bug of this package and panics naming both stages, which Receive
// turns into an internal error (the manager fails, the stack logged).
func moveStage[S interface {
	comparable
	String() string
}](op string, from, to S, legal map[S][]S) S {
	if from == to {
		return to
	}
	for _, ok := range legal[from] {
		if ok == to {
			return to
		}
	}
	panic(fmt.Sprintf("supervisor: illegal %s move %s → %s", op, from, to))
}

// restartPlan restarts a group of children of one level after one of them
// failed: they are shut down together, then, once the backoff has passed,
// started again one after another in the order they were added.
type restartPlan struct {
	s       *root
	lvl     *level
	stage   planStage
	recs    []*childRecord // in the order the children were added
	next    int            // index in recs of the next child to start
	due     time.Time      // when the first start may run
	wait    *barrier       // the stop of recs, or the start of recs[next-1]
	timer   clock.Timer    // restartDue, while backing off
	overdue clock.Timer    // stopOverdue, while stopping
	// watch keeps the Shutdown calls of its stop, so that an overdue one is
	// reported with the stack where it is stuck (onStuck).
	watch *childactor.ShutdownWatch
}

// restartDue: a plan's backoff has passed.
type restartDue struct{ plan *restartPlan }

// stopOverdue: a plan's children did not all stop within ShutdownTimeout.
type stopOverdue struct{ plan *restartPlan }

// stopStuck: where the Shutdown calls of an overdue plan are stuck, found
// off the mailbox.
type stopStuck struct {
	plan  *restartPlan
	stuck []supervisor.Unstopped
}

// step runs the plan from its stage on until a stage must wait: for its
// children to stop or one to start (a barrier), or for the backoff.
func (p *restartPlan) step() {
	s := p.s
	for {
		switch p.stage {
		case planStopping:
			if p.wait = s.stopAll(p, p.recs, p.stopContext()); p.wait != nil {
				return
			}
			p.overdue.Stop()
		case planBackingOff:
			for _, r := range p.recs {
				if r.plan == p && r.state == supervisor.StateStopped {
					s.setState(r, supervisor.StateBackingOff)
				}
			}
			if wait := p.due.Sub(s.clock.now()); wait > 0 && !p.piped() {
				weakPlan := weak.Make(p)
				p.timer = s.cfg.Clock.AfterFunc(wait, s.self.after(func() any {
					if p := weakPlan.Value(); p != nil {
						return restartDue{plan: p}
					}
					return nil
				}))
				return // backoffPassed goes on
			}
		case planStarting:
			if r := p.nextChild(); r != nil {
				p.wait = s.startIncarnation(p, r)
				return
			}
			p.cancel()
			return
		case planDone:
			return
		}
		p.become(p.stage + 1)
	}
}

// stopContext is the context of the plan's Stops: its level's, carrying
// its watch.
func (p *restartPlan) stopContext() context.Context {
	return childactor.WithShutdownWatch(p.lvl.stopContext(), p.watch)
}

// piped reports whether the plan's child has started again on its own
// (pipedRestart): its backoff has passed by the clock.
func (p *restartPlan) piped() bool {
	return len(p.recs) == 1 && p.recs[0].piped() != nil && p.recs[0].piped().taken
}

// nextChild is the plan's next child to start, or nil when none is left.
func (p *restartPlan) nextChild() *childRecord {
	s := p.s
	for p.next < len(p.recs) {
		r := p.recs[p.next]
		p.next++
		if r.plan != p {
			continue // taken out of the plan (StopChild, RemoveChild, a lost lease)
		}
		if r.state != supervisor.StateBackingOff && r.state != supervisor.StateStopped {
			// Started meanwhile by another decision (a RestartChild or
			// StartChild that was already stopping it when the plan took it
			// in): it is running again, and a second start would run two
			// incarnations at once.
			r.plan = nil
			continue
		}
		if !s.leaseHeld(r) {
			// A lost lease takes fenced children out of every plan and
			// group() never takes them in on a standby, so this only
			// enforces the invariant where it would break (starting r would
			// run it without the lease).
			r.plan = nil
			if r.state == supervisor.StateBackingOff {
				s.setState(r, supervisor.StateStopped)
			}
			continue
		}
		return r
	}
	return nil
}

func (p *restartPlan) current(b *barrier) bool { return p.stage != planDone && p.wait == b }

// settled: every child has stopped (planStopping), or the child started
// last has (planStarting): the plan goes on; a failed restart is a
// failure, and the plan's rest joins the plan that failure makes.
func (p *restartPlan) settled(b *barrier, err error) {
	p.wait = nil
	if p.stage == planStarting {
		r := p.recs[p.next-1]
		if err != nil && err != errInterrupted {
			p.s.supervise(r, err)
			if p.stage != planDone && r.plan != p {
				p.step() // r's failure went to a plan of its own level: go on
			}
			return
		}
		if r.plan == p {
			r.plan = nil
		}
		p.step()
		return
	}
	p.overdue.Stop()
	p.become(planBackingOff)
	p.step()
}

// backoffPassed: the plan's backoff has passed (restartDue), and it starts
// its children.
func (p *restartPlan) backoffPassed() {
	if p.stage == planBackingOff {
		p.become(planStarting)
		p.step()
	}
}

// shutdownOverdue: a restart's Shutdown calls did not return in time
// (stopOverdue). Where they are stuck is found off the mailbox (a dump of
// every goroutine's stack), and onStuck answers.
func (p *restartPlan) shutdownOverdue() {
	s := p.s
	if p.stage != planStopping || !s.supervising() || !slices.ContainsFunc(p.recs, p.hung) {
		return
	}
	watch := p.watch
	go func() { s.self.send(stopStuck{plan: p, stuck: watch.Unstopped()}) }()
}

// hung reports whether r, one of p's children, is still p's and stopping.
func (p *restartPlan) hung(r *childRecord) bool {
	return r.plan == p && r.state == supervisor.StateStopping
}

// onStuck answers a restart whose Shutdown calls did not return in time,
// stuck where stuck says: starting a child again while its previous
// incarnation may still run is what supervision must never do. A child
// whose Shutdown hangs inside a group that stops on its own
// (ExhaustedStop, every fleet member's) fails that group, the nearest
// such above it (contain): the group stops, the child stays Stopping
// until its Shutdown returns, and the rest of the manager goes on. Past
// every such group, the manager escalates. The error names the child, the
// bound and, as an *UnstoppedError, the stack of its Shutdown.
func (p *restartPlan) onStuck(stuck []supervisor.Unstopped) {
	s := p.s
	if p.stage != planStopping || !s.supervising() {
		return
	}
	for _, r := range slices.Clone(p.recs) {
		if !p.hung(r) {
			continue // stopped meanwhile, or taken out of p
		}
		err := fmt.Errorf("%s %q: Shutdown did not return within %s during a restart", r.spec.Kind, r.spec.Name, p.lvl.shutdownTimeout)
		if i := slices.IndexFunc(stuck, func(u supervisor.Unstopped) bool { return u.Name == r.spec.Name }); i >= 0 {
			err = fmt.Errorf("%w: %w", err, &supervisor.UnstoppedError{Children: stuck[i : i+1]})
		}
		if !r.lvl.contain(err) {
			s.escalate(r, err)
			return
		}
	}
}

// letGo: r, one of p's children, was taken out of p (quiesce) by what
// stops it now (a StopChild or RemoveChild, a lost lease or shard). If p
// is still stopping its children it no longer waits for r's stop: p will
// not start r again, and a Shutdown of r that hangs is for what took r
// out to answer (a RemoveChild's caller, a fencing's timeout), not a
// reason to hold p's other children back: p's overdue check looks only at
// its own children, and p would wait for as long as r's Shutdown hangs.
func (p *restartPlan) letGo(r *childRecord) {
	if p.stage == planStopping && p.wait != nil {
		p.wait.drop(r)
	}
}

// cancel ends the plan where it stands: done, its timers stopped, out of
// the plans in flight.
func (p *restartPlan) cancel() {
	p.become(planDone)
	if p.timer != nil {
		p.timer.Stop()
	}
	p.overdue.Stop()
	delete(p.s.plans, p)
}

// supervise handles one failure of rec with its level's strategy: restart
// what the strategy names after a backoff, or escalate when rec's budget is
// spent. A child that has started is supervised in every phase up to
// shutdown (a standby's webhooks, a store that recovered while controllers
// still start); a start call failing during Start fails the start instead
// (its round owns the barrier; a round after a re-election supervises it:
// startAttempt.supervised), and during shutdown nothing restarts.
func (s *root) supervise(rec *childRecord, err error) {
	if !s.supervising() || rec.stopRequested {
		return
	}
	rec.lvl.handleFailed(rec, err)
}

// handleFailed is the one restart decider, suture's handleFailedService:
// lvl, the level member is a child of (the root's or a group's), answers
// one failure of member (a hosted child, or a group that has failed) with
// its own policy and timing. It spends a restart of the
// level's budget or, spent, gives up (giveUp: the root escalates, a
// group stops or fails to its parent level, which decides here again);
// the level's strategy names what restarts (restartSet), after the
// level's backoff (backoff), and a restartPlan carries that out. Nothing
// else decides a restart: a restart ticket (ticketFor) is this function's
// answer given ahead, where it is known ahead, and a child that uses one
// still comes through here; a restart sent with a Stop (pipedRestart) is
// how a plan made here sends its start.
func (lvl *level) handleFailed(member *childRecord, err error) {
	s := lvl.s
	now := s.clock.now()
	if !lvl.allowRestart(member, now) {
		lvl.giveUp(member, err)
		return
	}
	plan := &restartPlan{s: s, lvl: lvl, due: now.Add(lvl.backoff(member, now))}
	members := map[*childRecord]bool{}
	for _, m := range lvl.restartSet(member) {
		for _, r := range m.node().restartWhole(nil) {
			members[r] = true
		}
	}
	// A child already in a plan (a restart in progress) joins this one, and
	// so do the rest of that plan's children still waiting to start.
	for r := range members {
		if old := r.plan; old != nil && old.stage != planDone {
			if encloses(old.lvl, lvl) {
				// A plan of an enclosing level (a group restarting whole)
				// goes on with its other children: this failure is this
				// level's, and this plan takes only what its strategy
				// names, so that a child failing in a group does not hold
				// the rest of the enclosing restart back.
				continue
			}
			old.cancel()
			for _, o := range old.recs {
				if o.plan == old {
					members[o] = true
				}
			}
		}
	}
	alone := len(members) == 1 && members[member]
	if p := member.piped(); alone && p != nil && p.self {
		// Restarting itself (its ticket): the plan sends it no Stop, and
		// the watch its own Stop carries is the plan's.
		plan.watch = p.watch
	} else {
		plan.watch = childactor.NewShutdownWatch()
	}
	if alone { // OneForOne: no need to walk every child for the order
		plan.recs = []*childRecord{member}
		member.plan = plan
		if s.pipes(member) {
			// The restart travels with the Stop: the child starts again as
			// soon as its Shutdown has returned and the backoff has passed.
			s.pipeRestart(member, plan.due)
		}
	} else {
		plan.recs = lvl.inOrder(members)
		for _, r := range plan.recs {
			r.plan = plan
		}
		if p := member.piped(); p != nil && p.self {
			// Restarting itself, but this plan restarts others with it, in
			// order: it is to stay stopped until its turn.
			p.revoked = true
			s.ctx.Send(member.pid, childactor.Stop{Ctx: plan.stopContext()})
		}
	}
	if len(plan.recs) == 0 {
		return // a group with nothing to start
	}
	if s.plans == nil {
		s.plans = map[*restartPlan]struct{}{}
	}
	s.plans[plan] = struct{}{}
	weakPlan := weak.Make(plan)
	plan.overdue = s.cfg.Clock.AfterFunc(lvl.shutdownTimeout, s.self.after(func() any {
		if p := weakPlan.Value(); p != nil {
			return stopOverdue{plan: p}
		}
		return nil
	}))
	plan.step()
}

// encloses reports whether outer is a level above inner (not inner itself).
func encloses(outer, inner *level) bool {
	for l := inner.parent; l != nil; l = l.parent {
		if l == outer {
			return true
		}
	}
	return false
}

// inOrder is members in the order a plan of lvl starts them again: lvl's
// start order (inStartOrder), then any other (joined from an earlier plan)
// in the order they were added.
func (lvl *level) inOrder(members map[*childRecord]bool) []*childRecord {
	out := make([]*childRecord, 0, len(members))
	seen := make(map[*childRecord]bool, len(members))
	for _, r := range append(lvl.inStartOrder(nil, nil), lvl.s.reg.children...) {
		if members[r] && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// restartsAlone reports whether a failure of rec, a child of lvl,
// restarts rec alone: OneForOne, or a store of a level whose stores
// restart apart (the root's).
func (lvl *level) restartsAlone(rec *childRecord) bool {
	return lvl.policy.Strategy == supervisor.OneForOne || (lvl.storesApart && rec.spec.Kind == actors.KindStore)
}

// restartSet is what lvl's strategy restarts when rec fails: rec alone
// (restartsAlone), or with every other child (AllForOne) or those added
// after it (RestForOne). Stores go with the rest unless the level keeps
// them apart; children stopped by StopChild are left alone, and so are
// plain runnables.
func (lvl *level) restartSet(rec *childRecord) []*childRecord {
	if lvl.restartsAlone(rec) {
		return []*childRecord{rec}
	}
	group := []*childRecord{rec}
	after := false
	for _, r := range lvl.children {
		if r == rec {
			after = true
			continue
		}
		if r.spec.Kind == actors.KindRunnable || (r.spec.Kind == actors.KindStore && lvl.storesApart) || r.stopRequested {
			continue
		}
		if !lvl.s.leaseHeld(r) {
			continue // a standby's webhook restarts alone: its controllers may not run
		}
		if lvl.policy.Strategy == supervisor.AllForOne || after {
			group = append(group, r)
		}
	}
	return group
}

// allowRestart spends one restart of rec's budget, or reports that rec has
// already restarted MaxRestarts times within RestartWindow.
func (lvl *level) allowRestart(rec *childRecord, now time.Time) bool {
	cutoff := now.Add(-lvl.policy.RestartWindow)
	x := rec.hist()
	x.budget = slices.DeleteFunc(x.budget, func(at time.Time) bool { return !at.After(cutoff) })
	if len(x.budget) >= lvl.policy.MaxRestarts {
		return false
	}
	x.budget = append(x.budget, now)
	return true
}

// backoff is how long rec waits before it starts again, by its level's
// backoff (backoffFor): InitialBackoff, doubling with each failure, capped
// at MaxBackoff, minus up to 20% of jitter; it starts from InitialBackoff
// again once the child has run for RestartWindow without failing.
func (lvl *level) backoff(rec *childRecord, now time.Time) time.Duration {
	s := lvl.s
	return backoffFor(rec, s.clock.since(now)-rec.startedAt, lvl.policy.RestartWindow, lvl.initialBackoff, lvl.maxBackoff, s.cfg.Jitter())
}

// fixedBackoff reports whether lvl's backoff cannot grow: the initial is
// the maximum, so a child waits it in full after every failure (jitter
// aside) and its answer to a failure is known before it comes (ticketFor).
func (lvl *level) fixedBackoff() bool { return lvl.initialBackoff >= lvl.maxBackoff }

// escalate stops the manager because rec failed past its budget.
func (s *root) escalate(rec *childRecord, err error) {
	e := &supervisor.EscalationError{Child: rec.spec.Name, Kind: rec.spec.Kind, Restarts: len(rec.budget()), Window: rec.lvl.policy.RestartWindow, Err: err}
	s.cfg.Logger.Error("child escalated: shutting the manager down", "child", rec.spec.Name, "err", e)
	s.out.emit(supervisor.Event{Type: supervisor.Escalated, Time: s.clock.now(), Child: rec.spec.Name, Kind: string(rec.spec.Kind),
		Phase: s.state.phase(), Restarts: rec.restarts(), Err: e})
	s.beginShutdown(e, s.cfg.boundedContext())
}

// lifetime is the base of the start calls the supervisor makes by itself
// (restarts, AddChild, a re-election's start round): it ends when the
// manager shuts down.
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// context is the lifetime's context, made on first use.
func (l *lifetime) context() context.Context {
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	return l.ctx
}

// end cancels every start call made on the lifetime's context.
func (l *lifetime) end() {
	if l.cancel != nil {
		l.cancel()
	}
}

// supervising reports whether failures are handled: from the start until
// the shutdown begins.
func (s *root) supervising() bool {
	return !s.ending() && s.state.phase() != supervisor.PhaseIdle
}

// Restarts on request.

func (s *root) onRestartChild(m supervisor.RestartChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(fmt.Sprintf("restart of child %q", m.Name), "restart", m.Name)
	if err == nil && rec.spec.Kind == actors.KindRunnable {
		err = fmt.Errorf("RestartChild %q: %w", m.Name, supervisor.ErrNothingToStart)
	}
	s.restartOnRequest(rec, err, "RestartChild", replyTo)
}

func (s *root) onStartChild(m supervisor.StartChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(fmt.Sprintf("start of child %q", m.Name), "start", m.Name)
	if err == nil && rec.node().state() == supervisor.StateRunning && !busy(rec, nil) {
		err = fmt.Errorf("StartChild %q: %w", m.Name, supervisor.ErrAlreadyRunning)
	}
	s.restartOnRequest(rec, err, "StartChild", replyTo)
}

// busy reports whether a decision is in progress on rec (on any child of
// a group) in what within lets in (nil: everything under rec): a start by
// hand leaves a child its hook refuses as it is, with everything under it
// (handStart), so what runs there, stopping or starting, is not its
// business.
func busy(rec *childRecord, within func(*childRecord) bool) bool {
next:
	for _, r := range hosted(rec) {
		for a := r; within != nil && a != rec; a = a.parent() {
			if !within(a) {
				continue next
			}
		}
		if owned(r) || r.state == supervisor.StateStarting || r.state == supervisor.StateStopping {
			return true
		}
	}
	return false
}

// requestStage is where a childRequest is, in this order.
type requestStage uint8

const (
	requestStopping requestStage = iota // the child's Shutdown runs (it is active)
	requestStarting                     // its start call runs
	requestDone                         // the requester has been answered
)

var requestStageNames = [...]string{"stopping", "starting", "done"}

func (st requestStage) String() string { return requestStageNames[st] }

// requestMoves is every move of a request's stage: down the stages in
// order, or to done from any (answered early: a shutdown, a StopChild or
// RemoveChild of its child, a failed start).
var requestMoves = map[requestStage][]requestStage{
	requestStopping: {requestStarting, requestDone},
	requestStarting: {requestDone},
	requestDone:     nil,
}

// become is the one way a request's stage moves (moveStage).
func (r *childRequest) become(to requestStage) {
	r.stage = moveStage("lifecycle request", r.stage, to, requestMoves)
}

// childRequest is a RestartChild, StartChild or AddChild in progress: the
// child is shut down if it is active (a Failed child still owes its
// Shutdown), then started, and the requester answered once its start call
// has returned; a failed start is then supervised like any failure.
//
// A request owns the children it has still to start (queue): they are
// busy, and nothing else starts them (a start round, a shard acquired)
// until their turn, so that a group's children start in its order, stores
// first.
// Three decisions reach it meanwhile: a StopChild or RemoveChild of its
// child (or of a group above it) ends it with ErrChildStopped or
// ErrChildRemoved (interrupt); a stand-down takes the fenced children out
// (the next start round starts them afresh: takeOut); a child of a shard
// not held at its turn is left for the shard's acquisition.
type childRequest struct {
	s     *root
	stage requestStage
	wait  *barrier
	rec   *childRecord // the child named: a hosted child or a group
	// recs are the hosted children it restarts, in order (rec alone unless
	// rec is a group); next is the index of the next to start.
	recs    []*childRecord
	next    int
	op      string // the message, for the errors
	replyTo *actor.PID
	// lost: a child it was to start was left to the lease's (its shard's)
	// next acquisition, lost meanwhile: the answer says so.
	lost bool
	// failed is the first start call of a group's child that failed: the
	// answer, once the rest have been started.
	failed error
	// replanned: a restart plan (a sibling's failure, a group above
	// restarted whole) took a group's child this request was starting, or
	// had still to start, and starts it in its turn: the answer says so
	// (errRestartedByPlan), as for one child; the group runs once the plan
	// is done, not now.
	replanned bool
}

// requestSet is the lifecycle requests in flight (RestartChild,
// StartChild, AddChild): a request is in it from open to answer, and the
// decisions that reach a request in flight (interrupt, takeOut) find it
// here.
type requestSet map[*childRequest]struct{}

// open makes a request of op on rec, in flight until answered.
func (q *requestSet) open(s *root, rec *childRecord, op string, replyTo *actor.PID) *childRequest {
	r := &childRequest{s: s, rec: rec, op: op, replyTo: replyTo}
	if *q == nil {
		*q = requestSet{}
	}
	(*q)[r] = struct{}{}
	return r
}

// restartOnRequest is RestartChild and StartChild once their own checks
// (err) have passed.
func (s *root) restartOnRequest(rec *childRecord, err error, op string, replyTo *actor.PID) {
	hs := handStart{s: s}
	if err == nil && busy(rec, hs.asked) {
		err = fmt.Errorf("%s %q: %w (%s)", op, rec.spec.Name, supervisor.ErrBusy, rec.node().state())
	}
	if err == nil && !s.leaseHeld(rec) {
		err = fmt.Errorf("%s %q: %w (shard %d)", op, rec.spec.Name, supervisor.ErrShardNotHeld, rec.spec.Shard)
	}
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	r := s.requests.open(s, rec, op, replyTo)
	reset := rec.stopRequested || op == "StartChild"
	rec.node().setStopped(false, s.clock.now(), hs.asked)
	r.recs = rec.node().appendStartOrder(nil, hs.keep)
	if reset {
		resetBudgets(rec, hs.left) // a group starts over (a hosted child has nothing under it)
	}
	r.queue()
	r.step()
}

// handStart is what the TreeHooks under the child a StartChild or
// RestartChild names answer to its start (TreeStarting), each asked once:
// a child whose hook refuses (a fleet's Offline member cluster's group) is
// left as it is, with everything under it, neither stopped nor started,
// its budgets kept.
type handStart struct {
	s    *root
	left map[*childRecord]bool // asked: true if refused
}

// asked reports whether the start goes into c: its hook, if any, lets it.
func (h *handStart) asked(c *childRecord) bool {
	refused, known := h.left[c]
	if !known {
		if hook := hookOf(c.spec); hook != nil {
			refused = hook.InTree(TreeStarting, c.spec.Name) != nil
		}
		if h.left == nil {
			h.left = map[*childRecord]bool{}
		}
		h.left[c] = refused
	}
	return !refused
}

// keep is the start's pruning (appendStartOrder): what a start of the tree
// starts (startable) that its hook lets it start.
func (h *handStart) keep(c *childRecord) bool { return h.asked(c) && h.s.startable(c) }

// queue marks the children a request is to start one after another (a
// group's; a hosted child's one) as busy until their turn: a lifecycle
// request on one of them meanwhile is refused (ErrBusy) rather than start
// it twice, and neither a start round nor a shard acquired starts them.
func (r *childRequest) queue() {
	for _, x := range r.recs {
		x.hist().queued = r
	}
}

// unqueue: x's turn has come, the request has ended, or x was taken out
// of it (takeOut).
func (r *childRequest) unqueue(x *childRecord) {
	if x.queued() == r {
		x.x.queued = nil
	}
}

// step runs the request from its stage on until it must wait for the
// child to stop or to start.
func (r *childRequest) step() {
	s, rec := r.s, r.rec
	for {
		switch r.stage {
		case requestStopping:
			if len(r.recs) == 1 && r.recs[0] == rec && s.pipes(rec) {
				// One hosted child: its restart travels with the Stop, as a
				// plan's does, and it starts again as soon as its Shutdown
				// has returned; the request records it, and answers, when
				// the Stopped and the Started come.
				s.pipeRestart(rec, time.Time{})
			}
			if r.wait = s.stopAll(r, r.recs, rec.lvl.stopContext()); r.wait != nil {
				return
			}
			r.stopped()
		case requestStarting:
			if r.next >= len(r.recs) {
				var err error
				switch {
				case r.failed != nil:
					err = fmt.Errorf("%s %q: %w", r.op, rec.spec.Name, r.failed)
				case r.lost:
					err = fmt.Errorf("%s %q: %w meanwhile: what it had still to start starts once it is acquired", r.op, rec.spec.Name, supervisor.ErrShardNotHeld)
				case r.replanned:
					err = fmt.Errorf("%s %q: %w", r.op, rec.spec.Name, errRestartedByPlan)
				}
				r.answer(err)
				return
			}
			next := r.recs[r.next]
			r.next++
			owned := next.queued() == r
			r.unqueue(next)
			planHolds := rec.sub != nil && next.inPlan() // a group's child that a restart plan holds (below)
			switch {
			case s.ending():
				err := supervisor.ErrShutdown
				if r.failed != nil {
					err = r.failed // the failure that, escalated, began the shutdown
				}
				r.answer(fmt.Errorf("%s %q: %w", r.op, rec.spec.Name, err))
			case !owned || next.stopRequested || !s.leaseHeld(next) || next.state.Active() || planHolds:
				// Taken out by a stand-down (takeOut: the next start round
				// starts it), stopped meanwhile by a StopChild of its own (a
				// group's child), or its shard is not held now: it starts
				// when acquired. Or a restart plan of its level has taken it
				// in and started it (or is stopping it) meanwhile: the first
				// to start it wins, as the plan skips one this request has
				// started (nextChild); a second start would run two
				// incarnations at once. A group's child that a plan holds
				// and has not started yet (stopping, backing off) is the
				// plan's to start, in its order, stores first. (One child
				// asked for alone is started here, and the plan skips it:
				// its answer is that start's.)
				r.lost = r.lost || (!next.stopRequested && !s.leaseHeld(next))
				r.replanned = r.replanned || planHolds
				continue
			default:
				r.wait = s.startIncarnation(r, next)
			}
			return
		case requestDone:
			return
		}
	}
}

// stopped: every child the request names has stopped, and they start
// again; a group's restart is counted once, now.
func (r *childRequest) stopped() {
	r.become(requestStarting)
	r.rec.node().restarted()
}

// answer ends the request.
func (r *childRequest) answer(err error) {
	r.become(requestDone)
	r.wait = nil
	for _, x := range r.recs[min(r.next, len(r.recs)):] {
		r.unqueue(x)
	}
	delete(r.s.requests, r) // the set has it from open to answer
	r.s.respond(r.replyTo, nil, err)
}

func (r *childRequest) current(b *barrier) bool { return r.stage != requestDone && r.wait == b }

// settled: the child has stopped, and starts; or its start call has
// returned, and the requester is answered (a failed start is then
// supervised like any failure). A group's child stopped while it started
// (a fence, a shard lost, a StopChild of its own) is left to what stopped
// it, one whose start failed to its level's decision, and the group goes
// on.
func (r *childRequest) settled(b *barrier, err error) {
	r.wait = nil
	if r.stage == requestStopping {
		r.stopped()
		r.step()
		return
	}
	if err == nil {
		r.step() // the next child, or the answer
		return
	}
	child := r.recs[r.next-1]
	if r.rec.sub == nil {
		// One hosted child: its start is the answer. A start cut short by
		// a restart plan of its level (a sibling's failure, its group
		// restarted whole) is left to the plan, which starts it again:
		// the answer says so.
		answer := err
		if err == errInterrupted && child.plan != nil && child.plan.stage != planDone {
			answer = errRestartedByPlan
		}
		r.answer(fmt.Errorf("%s %q: %w", r.op, r.rec.spec.Name, answer))
		if err != errInterrupted {
			r.s.supervise(child, err)
		}
		return
	}
	// A group's child: one stopped while it started is left to what
	// stopped it; one that failed to start is supervised like any failure
	// (its level decides; a plan it makes skips a child this request has
	// started meanwhile, nextChild), and the answer names the first such
	// failure. Either way the group goes on with the rest, which would
	// otherwise stay stopped with nothing to start them.
	if err == errInterrupted {
		r.lost = r.lost || !r.s.leaseHeld(child)
		r.replanned = r.replanned || child.inPlan()
	} else {
		if r.failed == nil {
			r.failed = err
		}
		r.s.supervise(child, err)
	}
	r.step()
}

// interrupt is a StopChild or RemoveChild of rec reaching the requests
// in flight: a request on rec, or on a child or group under it, ends now
// with err (ErrChildStopped, ErrChildRemoved), and what it had still to
// start stays stopped; a group's request above rec goes on without it
// (step skips a child stopped meanwhile).
func (q requestSet) interrupt(rec *childRecord, err error) {
	for r := range q {
		if inside(r.rec, rec) {
			// Both sentinels: a start cut short by a stop
			// (ErrStartInterrupted, as for a lost lease or shard), and
			// which stop it was (ErrChildStopped, ErrChildRemoved).
			r.answer(fmt.Errorf("%s %q: %w: %w", r.op, r.rec.spec.Name, errInterrupted, err))
		}
	}
}

// takeOut takes the children touches selects out of every group request
// that has still to start them: a stand-down's, whose next start round
// starts them afresh, stores first at every depth.
func (q requestSet) takeOut(touches func(*childRecord) bool) {
	for r := range q {
		for _, x := range r.recs[min(r.next, len(r.recs)):] {
			if touches(x) && x.queued() == r {
				r.unqueue(x)
				r.lost = true
			}
		}
	}
}
