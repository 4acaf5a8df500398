package supervisor

import (
	"context"
	"fmt"
	"slices"
	"time"
	"weak"

	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
)

// restartPlan restarts a group of children after one of them failed: they
// are shut down together, then, once the backoff has passed, started again
// one after another in the order they were added.
type restartPlan struct {
	recs      []*childRecord // in the order the children were added
	next      int            // index in recs of the next child to start
	due       time.Time      // when the first start may run
	timer     clock.Timer
	cancelled bool
}

// restartDue: a plan's backoff has passed.
type restartDue struct{ plan *restartPlan }

// stopOverdue: a plan's children did not all stop within ShutdownTimeout.
type stopOverdue struct{ plan *restartPlan }

// supervise handles one failure of rec with the strategy: restart what the
// strategy names after a backoff, or escalate when rec's budget is spent.
// A child that has started is supervised in every phase up to shutdown (a
// standby's webhooks, a store that recovered while controllers still start);
// a start call failing during Start fails the start instead (the caller
// settles its barrier), and during shutdown nothing restarts.
func (s *root) supervise(rec *childRecord, err error) {
	if !s.supervising() || rec.stopRequested {
		return
	}
	now := s.now()
	if !s.allowRestart(rec, now) {
		s.escalate(rec, err)
		return
	}
	plan := &restartPlan{due: now.Add(s.backoff(rec, now))}
	members := map[*childRecord]bool{}
	for _, r := range s.group(rec) {
		members[r] = true
	}
	// A child already in a plan (a restart in progress) joins this one, and
	// so do the rest of that plan's children still waiting to start.
	for r := range members {
		if old := r.plan; old != nil && !old.cancelled {
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
		for _, r := range s.children {
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
	overdue := s.cfg.Clock.AfterFunc(s.cfg.Timing.ShutdownTimeout, s.timerSend(func() any {
		if p := weakPlan.Value(); p != nil {
			return stopOverdue{plan: p}
		}
		return nil
	}))
	s.stopAll(plan.recs, s.boundedContext(), func() {
		overdue.Stop()
		if plan.cancelled {
			return
		}
		for _, r := range plan.recs {
			if r.plan == plan && r.state == StateStopped {
				s.setState(r, StateBackingOff)
			}
		}
		wait := plan.due.Sub(s.now())
		if wait <= 0 {
			s.startNext(plan)
			return
		}
		plan.timer = s.cfg.Clock.AfterFunc(wait, s.timerSend(func() any {
			if p := weakPlan.Value(); p != nil {
				return restartDue{plan: p}
			}
			return nil
		}))
	})
}

func (s *root) onRestartDue(m restartDue) {
	if !m.plan.cancelled {
		s.startNext(m.plan)
	}
}

// onStopOverdue escalates a restart whose Shutdown calls did not return in
// time: starting a child again while its previous incarnation may still run
// is what supervision must never do.
func (s *root) onStopOverdue(m stopOverdue) {
	if m.plan.cancelled || !s.supervising() {
		return
	}
	for _, r := range m.plan.recs {
		if r.plan == m.plan && r.state == StateStopping {
			err := fmt.Errorf("%s %q: Shutdown did not return within %s during a restart", r.spec.Kind, r.spec.Name, s.cfg.Timing.ShutdownTimeout)
			s.escalate(r, err)
			return
		}
	}
}

// startNext starts the plan's next child; each start waits for the previous.
func (s *root) startNext(plan *restartPlan) {
	for !plan.cancelled && plan.next < len(plan.recs) {
		r := plan.recs[plan.next]
		plan.next++
		if r.plan != plan {
			continue // taken out of the plan (StopChild, RemoveChild, a lost lease)
		}
		if r.state != StateBackingOff && r.state != StateStopped {
			// Started meanwhile by another decision (a RestartChild or
			// StartChild that was already stopping it when the plan took it
			// in): it is running again, and a second start would run two
			// incarnations at once.
			r.plan = nil
			continue
		}
		if !s.leaseHeld(r) {
			// The start point of every restart plan: a lost lease takes
			// fenced children out of every plan and group() never takes them
			// in on a standby, so this only enforces the invariant where it
			// would break (starting r would run it without the lease).
			r.plan = nil
			if r.state == StateBackingOff {
				s.setState(r, StateStopped)
			}
			continue
		}
		s.restart(r, func(err error) {
			if plan.cancelled {
				return
			}
			if err == nil || err == errInterrupted {
				if r.plan == plan {
					r.plan = nil
				}
				s.startNext(plan)
				return
			}
			s.supervise(r, err) // a failed restart is a failure; the plan's rest joins the new plan
		})
		return
	}
	if !plan.cancelled {
		s.cancelPlan(plan)
	}
}

// restart is the one way a child starts again, whatever decided it (a
// restart plan, RestartChild, StartChild): every start call after a child's
// first counts as a restart and publishes ChildRestarted. then gets the
// start call's outcome.
func (s *root) restart(rec *childRecord, then func(err error)) {
	rec.restarts++
	s.startIncarnation(rec, then)
	s.publish(ChildRestarted, rec, nil)
}

// startIncarnation starts a new incarnation of rec outside the manager's
// start rounds (restarts, AddChild), on the manager's lifetime context and
// bounded by the start timeout; then gets the start call's outcome.
func (s *root) startIncarnation(rec *childRecord, then func(err error)) {
	b := &barrier{failFast: true, then: then}
	b.add(rec)
	s.startChild(rec, s.lifetimeContext(), s.startTimeout)
}

func (s *root) cancelPlan(plan *restartPlan) {
	plan.cancelled = true
	if plan.timer != nil {
		plan.timer.Stop()
	}
	delete(s.plans, plan)
}

// group is what the strategy restarts when rec fails. Stores restart alone;
// controllers and webhooks stopped by StopChild are left alone.
func (s *root) group(rec *childRecord) []*childRecord {
	if s.cfg.Policy.Strategy == OneForOne || rec.spec.Kind == actors.KindStore {
		return []*childRecord{rec}
	}
	group := []*childRecord{rec}
	after := false
	for _, r := range s.children {
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
		if s.cfg.Policy.Strategy == AllForOne || after {
			group = append(group, r)
		}
	}
	return group
}

// allowRestart spends one restart of rec's budget, or reports that rec has
// already restarted MaxRestarts times within RestartWindow.
func (s *root) allowRestart(rec *childRecord, now time.Time) bool {
	cutoff := now.Add(-s.cfg.Policy.RestartWindow)
	rec.budget = slices.DeleteFunc(rec.budget, func(at time.Time) bool { return !at.After(cutoff) })
	if len(rec.budget) >= s.cfg.Policy.MaxRestarts {
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
	e := &EscalationError{Child: rec.spec.Name, Kind: rec.spec.Kind, Restarts: len(rec.budget), Window: s.cfg.Policy.RestartWindow, Err: err}
	s.cfg.Logger.Error("child escalated: shutting the manager down", "child", rec.spec.Name, "err", e)
	s.bus.Publish(Event{Type: Escalated, Time: s.now(), Child: rec.spec.Name, Kind: string(rec.spec.Kind),
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
	return s.shutdown == nil && s.phase != PhaseIdle && !s.phase.Ended()
}
