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
	"github.com/actorkube/controllermanager/supervisor"
)

// A restart, followed from its message: RestartChild or StartChild (here)
// checks the child and makes a childRequest; a failure (children.go: a
// child's report) makes a restartPlan (supervise). Either stops the
// children through a barrier (children.go), then starts them again with
// restart, the one way a child starts again; the child's actor
// (actors/child.go) runs the calls.

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
}

// restartDue: a plan's backoff has passed.
type restartDue struct{ plan *restartPlan }

// stopOverdue: a plan's children did not all stop within ShutdownTimeout.
type stopOverdue struct{ plan *restartPlan }

// step runs the plan from its stage on until a stage must wait: for its
// children to stop or one to start (a barrier), or for the backoff.
func (p *restartPlan) step() {
	s := p.s
	for {
		switch p.stage {
		case planStopping:
			if p.wait = s.stopAll(p, p.recs, s.boundedContext()); p.wait != nil {
				return
			}
			p.overdue.Stop()
		case planBackingOff:
			for _, r := range p.recs {
				if r.plan == p && r.state == supervisor.StateStopped {
					s.setState(r, supervisor.StateBackingOff)
				}
			}
			if wait := p.due.Sub(s.now()); wait > 0 {
				weakPlan := weak.Make(p)
				p.timer = s.cfg.Clock.AfterFunc(wait, s.timerSend(func() any {
					if p := weakPlan.Value(); p != nil {
						return restartDue{plan: p}
					}
					return nil
				}))
				return // onRestartDue goes on
			}
		case planStarting:
			if r := p.nextChild(); r != nil {
				p.wait = s.restart(p, r)
				return
			}
			s.cancelPlan(p)
			return
		case planDone:
			return
		}
		p.stage++
	}
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
			return
		}
		if r.plan == p {
			r.plan = nil
		}
		p.step()
		return
	}
	p.overdue.Stop()
	p.stage++
	p.step()
}

func (s *root) onRestartDue(m restartDue) {
	if m.plan.stage == planBackingOff {
		m.plan.stage++
		m.plan.step()
	}
}

// onStopOverdue escalates a restart whose Shutdown calls did not return in
// time: starting a child again while its previous incarnation may still run
// is what supervision must never do.
func (s *root) onStopOverdue(m stopOverdue) {
	if m.plan.stage != planStopping || !s.supervising() {
		return
	}
	for _, r := range m.plan.recs {
		if r.plan == m.plan && r.state == supervisor.StateStopping {
			err := fmt.Errorf("%s %q: Shutdown did not return within %s during a restart", r.spec.Kind, r.spec.Name, s.cfg.Timing.ShutdownTimeout)
			s.escalate(r, err)
			return
		}
	}
}

func (s *root) cancelPlan(plan *restartPlan) {
	plan.stage = planDone
	if plan.timer != nil {
		plan.timer.Stop()
	}
	plan.overdue.Stop()
	delete(s.plans, plan)
}

// supervise handles one failure of rec with its level's strategy: restart
// what the strategy names after a backoff, or escalate when rec's budget is
// spent. A child that has started is supervised in every phase up to
// shutdown (a standby's webhooks, a store that recovered while controllers
// still start); a start call failing during Start fails the start instead
// (its round owns the barrier), and during shutdown nothing restarts.
func (s *root) supervise(rec *childRecord, err error) {
	if !s.supervising() || rec.stopRequested {
		return
	}
	lvl := s.level
	now := s.now()
	if !lvl.allowRestart(rec, now) {
		s.escalate(rec, err)
		return
	}
	plan := &restartPlan{s: s, lvl: lvl, due: now.Add(s.backoff(rec, now))}
	members := map[*childRecord]bool{}
	for _, r := range s.group(lvl, rec) {
		members[r] = true
	}
	// A child already in a plan (a restart in progress) joins this one, and
	// so do the rest of that plan's children still waiting to start.
	for r := range members {
		if old := r.plan; old != nil && old.stage != planDone {
			s.cancelPlan(old)
			for _, o := range old.recs {
				if o.plan == old {
					members[o] = true
				}
			}
		}
	}
	if len(members) == 1 { // OneForOne: no need to walk every child for the order
		plan.recs = []*childRecord{rec}
		rec.plan = plan
	} else {
		for _, r := range lvl.children {
			if members[r] {
				plan.recs = append(plan.recs, r)
				r.plan = plan
			}
		}
	}
	if s.plans == nil {
		s.plans = map[*restartPlan]struct{}{}
	}
	s.plans[plan] = struct{}{}
	weakPlan := weak.Make(plan)
	plan.overdue = s.cfg.Clock.AfterFunc(s.cfg.Timing.ShutdownTimeout, s.timerSend(func() any {
		if p := weakPlan.Value(); p != nil {
			return stopOverdue{plan: p}
		}
		return nil
	}))
	plan.step()
}

// restart is the one way a child starts again, whatever decided it (a
// restart plan, RestartChild, StartChild): every start call after a child's
// first counts as a restart and publishes ChildRestarted. o is told the
// start call's outcome.
func (s *root) restart(o owner, rec *childRecord) *barrier {
	rec.restarts++
	b := s.startIncarnation(o, rec)
	s.publish(supervisor.ChildRestarted, rec, nil)
	return b
}

// group is what lvl's strategy restarts when rec fails. Stores restart
// alone; controllers and webhooks stopped by StopChild are left alone.
func (s *root) group(lvl *level, rec *childRecord) []*childRecord {
	if lvl.policy.Strategy == supervisor.OneForOne || rec.spec.Kind == actors.KindStore {
		return []*childRecord{rec}
	}
	group := []*childRecord{rec}
	after := false
	for _, r := range lvl.children {
		if r == rec {
			after = true
			continue
		}
		if r.stopRequested || (r.spec.Kind != actors.KindController && r.spec.Kind != actors.KindWebhook) {
			continue
		}
		if !s.leaseHeld(r) {
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
	rec.budget = slices.DeleteFunc(rec.budget, func(at time.Time) bool { return !at.After(cutoff) })
	if len(rec.budget) >= lvl.policy.MaxRestarts {
		return false
	}
	rec.budget = append(rec.budget, now)
	return true
}

// backoff is how long rec waits before it starts again: InitialBackoff,
// doubling with each failure, capped at MaxBackoff, minus up to 20% of
// jitter; it starts from InitialBackoff again once the child has run for
// RestartWindow without failing.
func (s *root) backoff(rec *childRecord, now time.Time) time.Duration {
	t := s.cfg.Timing
	if !rec.startedAt.IsZero() && now.Sub(rec.startedAt) >= s.cfg.Policy.RestartWindow {
		rec.backoffStep = 0
	}
	d := t.MaxBackoff
	if rec.backoffStep < 62 {
		if exp := t.InitialBackoff << rec.backoffStep; exp > 0 && exp < t.MaxBackoff && exp>>rec.backoffStep == t.InitialBackoff {
			d = exp
		}
	}
	rec.backoffStep++
	return d - time.Duration(float64(d)*0.2*s.cfg.Jitter())
}

// escalate stops the manager because rec failed past its budget.
func (s *root) escalate(rec *childRecord, err error) {
	e := &supervisor.EscalationError{Child: rec.spec.Name, Kind: rec.spec.Kind, Restarts: len(rec.budget), Window: s.cfg.Policy.RestartWindow, Err: err}
	s.cfg.Logger.Error("child escalated: shutting the manager down", "child", rec.spec.Name, "err", e)
	s.emit(supervisor.Event{Type: supervisor.Escalated, Time: s.now(), Child: rec.spec.Name, Kind: string(rec.spec.Kind),
		Phase: s.phase, Restarts: rec.restarts, Err: e})
	s.beginShutdown(e, s.boundedContext())
}

// lifetimeContext is the base of the start calls of restarts: it ends when
// the manager shuts down.
func (s *root) lifetimeContext() context.Context {
	if s.lifetime == nil {
		s.lifetime, s.endLifetime = context.WithCancel(context.Background())
	}
	return s.lifetime
}

// supervising reports whether failures are handled: from the start until
// the shutdown begins.
func (s *root) supervising() bool {
	return s.shutdown == nil && s.phase != supervisor.PhaseIdle && !s.phase.Ended()
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
	if err == nil && rec.state == supervisor.StateRunning && !busy(rec) {
		err = fmt.Errorf("StartChild %q: %w", m.Name, supervisor.ErrAlreadyRunning)
	}
	s.restartOnRequest(rec, err, "StartChild", replyTo)
}

// busy reports whether a decision is in progress on rec.
func busy(rec *childRecord) bool {
	return rec.plan != nil || rec.state == supervisor.StateStarting || rec.state == supervisor.StateStopping
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

// childRequest is a RestartChild, StartChild or AddChild in progress: the
// child is shut down if it is active (a Failed child still owes its
// Shutdown), then started, and the requester answered once its start call
// has returned; a failed start is then supervised like any failure.
type childRequest struct {
	s       *root
	stage   requestStage
	wait    *barrier
	rec     *childRecord
	op      string // the message, for the errors
	replyTo *actor.PID
}

// restartOnRequest is RestartChild and StartChild once their own checks
// (err) have passed.
func (s *root) restartOnRequest(rec *childRecord, err error, op string, replyTo *actor.PID) {
	if err == nil && busy(rec) {
		err = fmt.Errorf("%s %q: %w (%s)", op, rec.spec.Name, supervisor.ErrBusy, rec.state)
	}
	if err == nil && !s.leaseHeld(rec) {
		err = fmt.Errorf("%s %q: %w (shard %d)", op, rec.spec.Name, supervisor.ErrShardNotHeld, rec.spec.Shard)
	}
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	rec.stopRequested = false
	r := &childRequest{s: s, rec: rec, op: op, replyTo: replyTo}
	r.step()
}

// step runs the request from its stage on until it must wait for the
// child to stop or to start.
func (r *childRequest) step() {
	s, rec := r.s, r.rec
	for {
		switch r.stage {
		case requestStopping:
			if r.wait = s.stopAll(r, []*childRecord{rec}, s.boundedContext()); r.wait != nil {
				return
			}
		case requestStarting:
			switch {
			case s.phase != supervisor.PhaseRunning:
				r.answer(fmt.Errorf("%s %q: %w", r.op, rec.spec.Name, supervisor.ErrShutdown))
			case !s.leaseHeld(rec):
				r.answer(fmt.Errorf("%s %q: stopped, but %w meanwhile (shard %d)", r.op, rec.spec.Name, supervisor.ErrShardNotHeld, rec.spec.Shard))
			default:
				r.wait = s.restart(r, rec)
			}
			return
		case requestDone:
			return
		}
		r.stage++
	}
}

// answer ends the request.
func (r *childRequest) answer(err error) {
	r.stage = requestDone
	r.s.respond(r.replyTo, nil, err)
}

func (r *childRequest) current(b *barrier) bool { return r.stage != requestDone && r.wait == b }

// settled: the child has stopped, and starts; or its start call has
// returned, and the requester is answered (a failed start is then
// supervised like any failure).
func (r *childRequest) settled(b *barrier, err error) {
	r.wait = nil
	if r.stage == requestStopping {
		r.stage++
		r.step()
		return
	}
	if err != nil {
		r.answer(fmt.Errorf("%s %q: %w", r.op, r.rec.spec.Name, err))
		if err != errInterrupted {
			r.s.supervise(r.rec, err)
		}
		return
	}
	r.answer(nil)
}
