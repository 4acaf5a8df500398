package statespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
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
	r.checkTree()
	r.checkStoppedRan()
	r.checkAnswers()
	r.checkFleet()
}

// stopDone is a StopChild or RemoveChild of path, sent at sent, answered
// nil at answered.
type stopDone struct {
	path           string
	sent, answered time.Time
}

// noteStop records msg, sent at sent, when it is a StopChild or
// RemoveChild answered nil.
func (r *runner) noteStop(msg any, sent time.Time, err error) {
	var path string
	starts := false
	switch m := msg.(type) {
	case supervisor.StopChild:
		path = m.Name
	case supervisor.RemoveChild:
		path = m.Name
	case supervisor.StartChild:
		path, starts = m.Name, true
	case supervisor.RestartChild:
		path, starts = m.Name, true
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	done := stopDone{path: path, sent: sent, answered: time.Now()}
	switch {
	case starts:
		r.startsDone = append(r.startsDone, done)
	case err == nil:
		r.stopsDone = append(r.stopsDone, done)
	}
}

// answeredBefore reports whether the StartChild or RestartChild q was
// answered before at (then it was handled before anything sent at at).
// r.mu is held.
// Answers are matched to steps by path only, so it says yes only when
// every such step of q.path from q on was answered before at.
func (r *runner) answeredBefore(q lifecycleReq, at time.Time) bool {
	steps, answered := 0, 0
	for _, p := range r.reqs {
		if p.path == q.path && (p.do == DoStartChild || p.do == DoRestart) && !p.at.Before(q.at) {
			steps++
		}
	}
	for _, d := range r.startsDone {
		if d.path != q.path || d.sent.Before(q.at) {
			continue
		}
		if !d.answered.Before(at) {
			return false
		}
		answered++
	}
	return answered >= steps
}

// checkStoppedRan: a child stopped or removed (its StopChild or
// RemoveChild, or its group's, answered nil) runs no start call begun
// after that answer, unless a StartChild or RestartChild of it or of a
// group above it may have been handled after the stop (it had not been
// answered when the stop was sent, or has not been answered yet).
func (r *runner) checkStoppedRan() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.stopsDone {
		for path := range r.children {
			if !within(path, st.path) {
				continue
			}
			for _, in := range r.journal.Of(path) {
				if !in.From.After(st.answered) {
					continue
				}
				allowed := false
				for _, q := range r.reqs {
					if (q.do == DoStartChild || q.do == DoRestart) && q.at.Before(in.From) && within(path, q.path) && !r.answeredBefore(q, st.sent) {
						allowed = true
						break
					}
				}
				if m := fleetMember(path); m != "" && (r.fleet.builtBetween(m, st.answered, in.From) || r.backOnline(m, st.answered, in.From) ||
					r.cameBack(m, st.answered, in.From, false) || r.runnerStarted(st.answered, in.From)) {
					// A member's subtree built anew (its controllers are new
					// children), or its group started by the fleet as the
					// member came back Online (or back from an outage, not
					// yet said Online), or by the loops of a runner started
					// again, which read the tree afresh: the group is the
					// fleet's (docs/fleet.md).
					allowed = true
				}
				if allowed {
					continue
				}
				r.violateOnceLocked(fmt.Sprintf("stoppedran/%s/%d", path, in.Inc), Violation{
					Invariant: StoppedRan, Child: path, Time: in.From,
					Detail: fmt.Sprintf("incarnation %d started at %s, after StopChild or RemoveChild of %s answered nil at %s, with no StartChild or RestartChild of it or above it sent since",
						in.Inc, stamp(in.From), st.path, stamp(st.answered)),
				})
			}
		}
	}
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
	type passed struct {
		name, kind string
		inc        int
		at         time.Time
	}
	var passes []passed
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
			passes = append(passes, passed{name: name, kind: c.kind, inc: inc, at: at})
		}
	}
	if r.srv == nil || len(passes) == 0 {
		return
	}
	// The history is read after the guards were called: a guard that
	// passed at a moment must be covered by the writes before it, and one
	// read before could miss the write that won the lease.
	history := r.srv.History()
	for _, p := range passes {
		names := r.leases(p.name)
		if r.sc.Shards > 1 && p.kind == "store" {
			names = r.leases("store")
		}
		if gap, ok := uncovered(validity(history, names), p.at, p.at); ok {
			r.violateOnce(fmt.Sprintf("guard/%s/%d/lease", p.name, p.inc), Violation{Invariant: GuardPassed, Child: p.name, Time: gap,
				Detail: fmt.Sprintf("incarnation %d's lease guard passed at %s, when this replica did not hold its lease (lease writes: %s)",
					p.inc, stamp(p.at), describeHistory(history, p.at))}, true)
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
		if o.more != nil {
			detail += "; " + o.more()
		} else if o.child != "" && r.isGroup(o.child) {
			detail += "; its children now: " + r.describeGroup(o.child)
		} else if o.child != "" {
			detail += "; its last calls: " + fmt.Sprint(r.journal.Tail(o.child, 6))
		} else if o.inv == NotEnded {
			detail += "; " + r.unended()
		}
		v := Violation{Invariant: o.inv, Child: o.child, Time: now, Detail: detail}
		if o.pauseExcuses > 0 && r.pauses.Longest() > o.pauseExcuses {
			r.excuseOnce("obligation/"+o.key, v)
			continue
		}
		if o.key != "" {
			r.violateOnce("obligation/"+o.key, v, false) // the same stuck state, once
			continue
		}
		r.violate(v)
	}
}

// checkStates looks for children stuck in a state that something should
// end: BackingOff (a timer), Stopping (a Shutdown), Starting (a start
// call), Failed (its handling); each gets an obligation to leave it.
func (r *runner) checkStates(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	asked := time.Now()
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
	r.checkHeld(st, now)
	all := flatten(st.Children)
	r.checkSince(all, asked)
	if st.Phase == supervisor.PhaseRunning {
		r.checkStranded(all)
	}
	for _, cs := range all {
		if cs.Kind.IsGroup() {
			// A group's state is read from its children's, each checked
			// here.
			continue
		}
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
						idle, ok := r.journal.Idle(name, time.Now())
						if cs.Kind.IsGroup() {
							idle, ok = r.journal.IdleWithin(name, time.Now())
						}
						if !ok || idle < time.Second {
							return true
						}
					}
					if state == supervisor.StateBackingOff && r.inPlanLevel(name) &&
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

// checkHeld: with election on, a manager Running holds what it runs
// under, the lease or at least one shard (Status.Leader); one that holds
// nothing is a standby, in Electing (docs/leader-election.md). Between
// the loss and the new phase the stand-down stops the fenced children: a
// Running replica that holds nothing must leave Running within the fence
// timeout and ShutdownTimeout. Status reads the phase and what is held in
// one snapshot.
func (r *runner) checkHeld(st cm.Status, now time.Time) {
	if r.sc.Election == ElectionOff {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.Phase != supervisor.PhaseRunning || st.Leader {
		r.unheldSince = time.Time{}
		return
	}
	if r.unheldSince.IsZero() {
		r.unheldSince = now
	}
	since := r.unheldSince
	key := fmt.Sprintf("unheld/%d", since.UnixNano())
	if slices.ContainsFunc(r.obligations, func(o *obligation) bool { return o.key == key }) {
		return
	}
	r.obligations = append(r.obligations, &obligation{
		inv: RunningUnheld, key: key, due: since.Add(FenceTimeout + ShutdownTimeout + r.cfg.Slack),
		what: fmt.Sprintf("Running at %s holding neither the lease nor a shard (Status.Leader false), and still Running", stamp(since)),
		// A later Status that is not Running, or leads, resets
		// unheldSince; the manager's end ends it too.
		resolved: func() bool { return !r.doneAt.IsZero() || !r.unheldSince.Equal(since) },
	})
}

// strandable reports whether a child of kind runs whenever the manager
// runs, so that checkStranded judges it: a webhook always (it runs on every
// replica, whoever leads); a controller or a store when there is no
// election (with one, a standby's or a lost shard's are Stopped for as long
// as the lease is not held).
func (r *runner) strandable(kind actors.Kind) bool {
	return kind == actors.KindWebhook ||
		(r.sc.Election == ElectionOff && (kind == actors.KindController || kind == actors.KindStore))
}

// checkStranded: while the manager runs, a webhook (or, without election,
// a controller or a store: strandable) that is Stopped, with no group above it Stopped
// or Stopping and no StopChild or RemoveChild ever sent for it or a group
// above it, must leave Stopped within the longest backoff: nothing stops a
// webhook for good but a request or its group's spent budget (OnExhausted
// Stop). A group above it still Stopping is on its way: stopped for good
// (its budget spent) while a sibling's Shutdown hangs, or restarting whole,
// which starts the webhook again once that Shutdown returns; so is one
// Starting, whose store's Recover runs before its controllers start
// (onItsWay).
func (r *runner) checkStranded(all []supervisor.ChildStatus) {
	stopped := map[string]bool{}
	for _, cs := range all {
		if cs.State == supervisor.StateStopped || (cs.Kind.IsGroup() && onItsWay(cs.State)) {
			stopped[cs.Name] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cs := range all {
		if !r.strandable(cs.Kind) || cs.State != supervisor.StateStopped {
			continue
		}
		name, since := cs.Name, cs.Since
		if slices.ContainsFunc(ancestry(name)[1:], func(p string) bool { return stopped[p] }) || r.stopAsked(name) {
			continue
		}
		key := fmt.Sprintf("stranded/%s/%d", name, since.UnixNano())
		if slices.ContainsFunc(r.obligations, func(o *obligation) bool { return o.key == key }) {
			continue
		}
		// Due the longest backoff after the first check that finds nothing
		// above it stopped or stopping: a webhook stopped with its group
		// (a spent budget) and still Stopped while a StartChild of the group
		// starts its children one after another is not overdue from when
		// it stopped.
		r.obligations = append(r.obligations, &obligation{
			inv: Stranded, child: name, key: key, due: time.Now().Add(r.sc.maxBackoff() + r.cfg.Slack),
			what: fmt.Sprintf("%s Stopped since %s while the manager runs, with no StopChild or RemoveChild of it or above it and no group above it stopped", cs.Kind, stamp(since)),
			resolved: func() bool {
				if !r.doneAt.IsZero() || r.phase != cm.PhaseRunning || r.stopAsked(name) {
					return true
				}
				st, err := r.statusNow()
				if err != nil || st.Phase.Ended() {
					return true
				}
				cs, ok := st.Child(name)
				if !ok || cs.State != supervisor.StateStopped || !cs.Since.Equal(since) {
					return true
				}
				for _, p := range ancestry(name)[1:] {
					if g, ok := st.Child(p); ok && (g.State == supervisor.StateStopped || onItsWay(g.State)) {
						return true
					}
				}
				return false
			},
		})
	}
}

// onItsWay reports whether a group in state st is on its way somewhere
// that settles its Stopped children: Stopping (stopped for good, or
// restarting whole), or Starting (its children start in order, stores
// first: a controller waits, Stopped, while a store's Recover runs, as a
// member's cache syncs against an API server that is down).
func onItsWay(st supervisor.ChildState) bool {
	return st == supervisor.StateStopping || st == supervisor.StateStarting
}

// stopAsked reports whether a StopChild or RemoveChild of path or of a
// group above it was ever sent. r.mu is held.
func (r *runner) stopAsked(path string) bool {
	return slices.ContainsFunc(r.reqs, func(q lifecycleReq) bool {
		return (q.do == DoStop || q.do == DoRemove) && within(path, q.path)
	})
}

// statusNow is the manager's Status, asked with a bound (an error before
// the manager is built: the checker's own tests judge without one).
func (r *runner) statusNow() (cm.Status, error) {
	if r.m == nil {
		return cm.Status{}, errors.New("no manager")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.m.Status(ctx)
}

// flatten lists children and, depth first, every group's children.
func flatten(children []supervisor.ChildStatus) []supervisor.ChildStatus {
	var out []supervisor.ChildStatus
	for _, cs := range children {
		out = append(out, cs)
		out = append(out, flatten(cs.Children)...)
	}
	return out
}

// waitsInPlan reports whether child, failed at at, is waiting BackingOff in
// an AllForOne or RestForOne plan behind a sibling whose restarts keep
// failing within its budget: the plan is going on, in order (as OTP's
// rest_for_one waits for the child before), as the stuck check excuses
// too. r.mu is held; Status does not take it.
func (r *runner) waitsInPlan(child string, at time.Time) bool {
	if !r.inPlanLevel(child) ||
		!r.eventSince(at, func(x cm.Event) bool { return x.Type == cm.ChildRestarted && x.Child != child }) {
		return false
	}
	cs, ok := r.childStatus(child)
	return ok && cs.State == supervisor.StateBackingOff
}

// checkSince: a child's Since is when it entered its State, so a child
// seen in another state by an earlier Status (asked for at asked) cannot
// have entered its state now before then.
func (r *runner) checkSince(children []supervisor.ChildStatus, asked time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cs := range children {
		prev, seen := r.lastSeen[cs.Name]
		r.lastSeen[cs.Name] = seenState{state: cs.State, asked: asked}
		if !seen || prev.state == cs.State || !cs.Since.Before(prev.asked) {
			continue
		}
		r.violateOnce("since/"+cs.Name, Violation{ // once a child: it repeats at every change
			Invariant: SinceWrong, Child: cs.Name, Time: asked,
			Detail: fmt.Sprintf("Status says %s %s since %s, but a Status asked for at %s said %s", cs.Kind, cs.State, stamp(cs.Since), stamp(prev.asked), prev.state),
		}, false)
	}
}

// seenState is a child's state in the last Status the checks asked for.
type seenState struct {
	state supervisor.ChildState
	asked time.Time
}

// describeGroup lists the states of group's children, as Status says now,
// and when each child's last call returned.
func (r *runner) describeGroup(group string) string {
	cs, ok := r.childStatus(group)
	if !ok {
		return "(no Status)"
	}
	var parts []string
	for _, c := range flatten(cs.Children) {
		p := fmt.Sprintf("%s %s since %s", c.Name, c.State, stamp(c.Since))
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// inPlanLevel reports whether child, or a group above it, is on a level
// whose strategy restarts siblings (AllForOne or RestForOne).
func (r *runner) inPlanLevel(child string) bool {
	for _, a := range ancestry(child) {
		if r.strategyOf(parentPath(a)) != cm.OneForOne {
			return true
		}
	}
	return false
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
	st, err := r.statusNow()
	if err != nil || st.Phase.Ended() {
		return cs, false
	}
	return st.Child(name)
}

// unended describes where a manager stands, from Status: its phase, every
// child that is not Stopped with its kind and state, and those Stopped.
func (r *runner) unended() string {
	st, err := r.statusNow()
	if err != nil {
		return "Status: " + err.Error()
	}
	var open, stopped []string
	for _, c := range st.Children {
		if c.State != cm.StateStopped {
			open = append(open, fmt.Sprintf("%s %s %s", c.Kind, c.Name, c.State))
		} else {
			stopped = append(stopped, c.Name)
		}
	}
	return fmt.Sprintf("phase %s; not stopped: %v; stopped: %v", st.Phase, open, stopped)
}

// answer is a lifecycle call of path answered nil: sent at sent, answered
// at answered (both on the runner's clock, as the journal's times are).
type answer struct {
	msg            string // RestartChild, StartChild, AddChild, StopChild, RemoveChild
	path           string
	sent, answered time.Time
}

// noteAnswer records msg, sent at sent, when it was answered nil: the
// next check judges it (checkAnswers).
func (r *runner) noteAnswer(msg any, sent time.Time, err error) {
	if err != nil {
		return
	}
	a := answer{sent: sent, answered: time.Now()}
	switch m := msg.(type) {
	case supervisor.StopChild:
		a.msg, a.path = "StopChild", m.Name
	case supervisor.RemoveChild:
		a.msg, a.path = "RemoveChild", m.Name
	case supervisor.RestartChild:
		a.msg, a.path = "RestartChild", m.Name
	case supervisor.StartChild:
		a.msg, a.path = "StartChild", m.Name
	case supervisor.AddChild:
		a.msg, a.path = "AddChild", m.Runnable.(interface{ Name() string }).Name()
		if m.Parent != "" {
			a.path = m.Parent + "/" + a.path
		}
	default:
		return
	}
	r.mu.Lock()
	r.answers = append(r.answers, a)
	r.mu.Unlock()
}

// checkAnswers judges every lifecycle call answered nil since the last
// check (AnswerWrong). Each is judged once: the journal entries its answer
// waited for were written before the answer was sent.
func (r *runner) checkAnswers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.answers {
		if detail := r.answerWrong(a); detail != "" {
			r.violateOnceLocked(fmt.Sprintf("answer/%s/%s/%d", a.msg, a.path, a.sent.UnixNano()), Violation{
				Invariant: AnswerWrong, Child: a.path, Time: a.answered,
				Detail: fmt.Sprintf("%s(%s), sent at %s, answered nil at %s, but %s", a.msg, a.path, stamp(a.sent), stamp(a.answered), detail),
			})
		}
	}
	r.judged += len(r.answers)
	r.answers = r.answers[:0]
}

// answerWrong says how what a's children did disagrees with a, or "".
// r.mu is held.
func (r *runner) answerWrong(a answer) string {
	switch a.msg {
	case "StopChild", "RemoveChild":
		for path := range r.children {
			if !within(path, a.path) {
				continue
			}
			for _, in := range r.journal.Of(path) {
				// Started before the call was sent: its Shutdown is the
				// call's to wait for.
				if !in.StartedOK || !in.StartEnd.Before(a.sent) {
					continue
				}
				if !in.ShutdownOut || in.ShutdownEnd.After(a.answered) {
					return fmt.Sprintf("%s incarnation %d (started at %s) had not returned from its Shutdown by then", path, in.Inc, stamp(in.From))
				}
			}
		}
	default:
		c := r.children[a.path]
		if c == nil {
			return "" // a group's call answers for its children, not judged
		}
		if a.msg == "AddChild" && r.sc.Election != ElectionOff && c.kind != "webhook" {
			return "" // answered at once when its shard is not held
		}
		for _, in := range r.journal.Of(a.path) {
			if in.From.After(a.sent) && in.StartedOK && !in.StartEnd.After(a.answered) {
				return ""
			}
		}
		return "no start call of it began after the call was sent and returned nil before the answer"
	}
	return ""
}
