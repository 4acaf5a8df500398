package supervisor

import "github.com/actorkube/controllermanager/actors"

// The decision "stop supervising what is in progress" is made in one place,
// quiesce, for three callers that differ only in which children it touches:
// a shutdown touches every child, a lost lease only the children the lease
// fences, and StopChild or RemoveChild the one child they name. Whatever a
// quiesce does not touch goes on as before: a webhook backing off when the
// lease is lost still restarts, and a standby's webhooks are still probed.

// fencedKind reports whether the lease fences children of kind: controllers
// and stores run only while this replica holds the lease; webhooks and plain
// runnables run on standbys too.
func fencedKind(kind actors.Kind) bool {
	return kind == actors.KindController || kind == actors.KindStore
}

// everyChild is the scope of a shutdown.
func everyChild(*childRecord) bool { return true }

// fencedChild is the scope of a lost lease.
func fencedChild(rec *childRecord) bool { return fencedKind(rec.spec.Kind) }

// onlyChild is the scope of a lifecycle message naming rec.
func onlyChild(rec *childRecord) func(*childRecord) bool {
	return func(r *childRecord) bool { return r == rec }
}

// quiesce takes the children that touches selects out of every restart plan
// and puts those backing off in StateStopped, so that nothing restarts them.
// A plan left with no child to restart is cancelled; a plan that also
// restarts children outside the scope (AllForOne after a webhook failed,
// say) goes on for those alone.
func (s *root) quiesce(touches func(*childRecord) bool) {
	for plan := range s.plans {
		rest := 0
		for _, r := range plan.recs {
			if r.plan != plan {
				continue // restarted already, or taken out before
			}
			if touches(r) {
				r.plan = nil
				continue
			}
			rest++
		}
		if rest == 0 {
			s.cancelPlan(plan)
		}
	}
	for _, rec := range s.children {
		if touches(rec) && rec.state == StateBackingOff {
			rec.plan = nil
			s.setState(rec, StateStopped)
		}
	}
}

// leaseHeld reports whether rec may run now: election is off, rec is not
// fenced (a webhook, a plain runnable), or this replica holds what fences
// it and is not fencing it: a store, some shard (the single lease being
// the one shard); a controller, its own shard.
func (s *root) leaseHeld(rec *childRecord) bool {
	if s.cfg.Elector == nil || !fencedChild(rec) {
		return true
	}
	if !s.leader || s.fencing != nil {
		return false
	}
	if rec.spec.Kind != actors.KindController {
		return true
	}
	sh := s.shardOf(rec)
	return sh.held && !sh.releasing && sh.fencing == nil
}
