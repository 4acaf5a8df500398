package statespace

import (
	"context"
	"fmt"
	"slices"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// check checks every invariant now: the bounded-time ones due, the
// children's states in Status, the lease.
func (r *runner) check(ctx context.Context) {
	now := time.Now()
	r.checkStates(ctx, now)
	r.checkObligations(now)
	r.checkLease(now)
	r.checkGuards(false)
}

// guardSlack is how long after a Shutdown has returned (as its child
// journals it, just before returning) its incarnation's guard may still
// pass: the guard ends on the same goroutine right after.
const guardSlack = 100 * time.Millisecond

// checkGuards calls every incarnation's lease guard now: one that passes
// must belong to an incarnation whose Shutdown has not returned, and with
// election on, at a moment this replica held the lease the child runs under
// by the fake API server's history. ended: the manager has stopped, and
// every guard must fail.
func (r *runner) checkGuards(ended bool) {
	r.mu.Lock()
	children := make(map[string]*child, len(r.children))
	for name, c := range r.children {
		if c.kind == "controller" || c.kind == "store" {
			children[name] = c
		}
	}
	r.mu.Unlock()
	var history []leasetest.Write
	if r.srv != nil {
		history = r.srv.History()
	}
	for name, c := range children {
		for inc, guard := range c.incGuards() {
			at := time.Now()
			if guard() != nil {
				continue
			}
			key := fmt.Sprintf("guard/%s/%d", name, inc)
			if ended {
				r.violateOnce(key+"/end", Violation{Invariant: GuardPassed, Child: name, Time: at,
					Detail: fmt.Sprintf("incarnation %d's lease guard passed after the manager had stopped", inc)}, false)
				continue
			}
			for _, in := range r.journal.Of(name) {
				if in.Inc == inc && in.ShutdownOut && in.ShutdownEnd.Add(guardSlack).Before(at) {
					r.violateOnce(key+"/shutdown", Violation{Invariant: GuardPassed, Child: name, Time: at,
						Detail: fmt.Sprintf("incarnation %d's lease guard passed at %s, after its Shutdown returned at %s", inc, stamp(at), stamp(in.ShutdownEnd))}, true)
				}
			}
			if r.srv == nil {
				continue
			}
			names := r.leases(name)
			if r.sc.Shards > 1 && c.kind == "store" {
				names = r.leases("store")
			}
			if gap, ok := uncovered(validity(history, names), at, at); ok {
				r.violateOnce(key+"/lease", Violation{Invariant: GuardPassed, Child: name, Time: gap,
					Detail: fmt.Sprintf("incarnation %d's lease guard passed at %s, when this replica did not hold its lease (lease writes: %s)",
						inc, stamp(at), describeHistory(history, at))}, true)
			}
		}
	}
}

func (r *runner) checkObligations(now time.Time) {
	r.mu.Lock()
	var overdue []*obligation
	r.obligations = slices.DeleteFunc(r.obligations, func(o *obligation) bool {
		if o.resolved() {
			return true
		}
		if now.After(o.due) {
			overdue = append(overdue, o)
			return true
		}
		return false
	})
	r.mu.Unlock()
	for _, o := range overdue {
		detail := o.what
		if o.child != "" {
			detail += "; its last calls: " + fmt.Sprint(r.journal.Tail(o.child, 6))
		}
		r.violate(Violation{Invariant: o.inv, Child: o.child, Time: now, Detail: detail})
	}
}

// checkStates looks for children stuck in a state that something should
// end: BackingOff (a timer), Stopping (a Shutdown), Starting (a start
// call), Failed (its handling); each gets an obligation to leave it.
func (r *runner) checkStates(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := r.m.Status(sctx)
	if err != nil {
		if ctx.Err() == nil {
			r.violate(Violation{Invariant: Stuck, Time: now, Detail: "Status did not answer within 5s: " + err.Error()})
		}
		return
	}
	if st.Phase.Ended() {
		return
	}
	for _, cs := range st.Children {
		var bound time.Duration
		switch cs.State {
		case supervisor.StateBackingOff:
			bound = r.sc.maxBackoff() + r.cfg.Slack
		case supervisor.StateStopping, supervisor.StateStarting, supervisor.StateFailed:
			bound = r.cfg.Slack
		default:
			continue
		}
		name, state, since := cs.Name, cs.State, cs.Since
		key := fmt.Sprintf("stuck/%s/%s/%d", name, state, since.UnixNano())
		r.mu.Lock()
		dup := slices.ContainsFunc(r.obligations, func(o *obligation) bool { return o.key == key })
		if !dup {
			r.obligations = append(r.obligations, &obligation{
				inv: Stuck, child: name, key: key, due: since.Add(bound),
				what: fmt.Sprintf("%s since %s (phase %s) with none of its calls running", state, stamp(since), st.Phase),
				resolved: func() bool {
					if !r.doneAt.IsZero() {
						return true
					}
					if state != supervisor.StateBackingOff {
						// Stopping, Starting and Failed are stuck only with no
						// call of the child running, for a second at least.
						if idle, ok := r.journal.Idle(name, time.Now()); !ok || idle < time.Second {
							return true
						}
					}
					if state == supervisor.StateBackingOff && r.sc.Strategy != cm.OneForOne &&
						r.eventSince(since, func(x cm.Event) bool { return x.Type == cm.ChildRestarted && x.Child != name }) {
						// Waiting in an AllForOne or RestForOne plan behind a
						// sibling whose restarts keep failing within its
						// budget: the plan is going on, in order (as OTP's
						// rest_for_one waits for the child before).
						return true
					}
					return !r.stillIn(name, state, since)
				},
			})
		}
		r.mu.Unlock()
	}
}

// waitsInPlan reports whether child, failed at at, is waiting BackingOff in
// an AllForOne or RestForOne plan behind a sibling whose restarts keep
// failing within its budget: the plan is going on, in order (as OTP's
// rest_for_one waits for the child before), as the stuck check excuses
// too. r.mu is held; Status does not take it.
func (r *runner) waitsInPlan(child string, at time.Time) bool {
	if r.sc.Strategy == cm.OneForOne ||
		!r.eventSince(at, func(x cm.Event) bool { return x.Type == cm.ChildRestarted && x.Child != child }) {
		return false
	}
	cs, ok := r.childStatus(child)
	return ok && cs.State == supervisor.StateBackingOff
}

// stillIn asks Status whether name is still in state since since. r.mu is
// held; Status does not take it.
func (r *runner) stillIn(name string, state supervisor.ChildState, since time.Time) bool {
	cs, ok := r.childStatus(name)
	return ok && cs.State == state && cs.Since.Equal(since)
}

// childStatus asks Status for name's entry; ok is false when Status does
// not answer within 5s, the manager has ended, or it has no such child.
func (r *runner) childStatus(name string) (cs supervisor.ChildStatus, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := r.m.Status(ctx)
	if err != nil || st.Phase.Ended() {
		return cs, false
	}
	return st.Child(name)
}
