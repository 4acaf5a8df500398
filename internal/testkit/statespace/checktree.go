package statespace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cm "github.com/actorkube/controllermanager"
)

// The invariants of a tree scenario (docs/supervision.md, "Supervision
// trees: groups"), read from the events, the journal and the lifecycle
// steps taken.

// lifecycleReq is a lifecycle step the runner sent, and when.
type lifecycleReq struct {
	do   Action
	path string
	at   time.Time
	// answered is when its answer came (zero: not yet), err the answer.
	answered time.Time
	err      error
}

// mayHaveStartedAfter reports whether q, a StartChild or RestartChild,
// may have been carried out after at although it was sent before: each
// request goes from a goroutine of its own, so the manager can take it
// after what happened at at. It was, unless it had been answered by then
// or its answer says it started nothing (refused, or cut short by a stop).
func (q lifecycleReq) mayHaveStartedAfter(at time.Time) bool {
	if !q.answered.IsZero() && q.answered.Before(at) {
		return false
	}
	for _, refused := range []error{cm.ErrStartInterrupted, cm.ErrBusy, cm.ErrNotRunning, cm.ErrUnknownChild,
		cm.ErrShardNotHeld, cm.ErrChildStopped, cm.ErrChildRemoved} {
		if errors.Is(q.err, refused) {
			return false
		}
	}
	return true
}

// isGroup reports whether path is one of the scenario's groups.
func (r *runner) isGroup(path string) bool {
	_, ok := r.sc.group(path)
	return ok
}

// ancestry returns path and the paths of the groups above it, innermost
// first.
func ancestry(path string) []string {
	out := []string{path}
	for p := parentPath(path); p != ""; p = parentPath(p) {
		out = append(out, p)
	}
	return out
}

// strategyOf is the strategy of the level at path ("" is the root), its
// inherited fields resolved.
func (r *runner) strategyOf(path string) cm.SupervisionStrategy {
	for p := path; p != ""; p = parentPath(p) {
		if g, ok := r.sc.group(p); ok && g.Strategy != "" {
			return g.Strategy
		}
	}
	return r.sc.Strategy
}

// levelOrder returns the names of the children of the level at path in
// the order added (initial ones, then those added by AddChild). r.mu is
// held.
func (r *runner) levelOrder(path string) []string {
	return r.order[path]
}

// kindAt is the kind of the child at path: "group", or its child's kind.
// r.mu is held.
func (r *runner) kindAt(path string) string {
	if r.isGroup(path) {
		return "group"
	}
	if c := r.children[path]; c != nil {
		return c.kind
	}
	return ""
}

// takes reports whether a failure of z, a child of the level at parent,
// restarts a, another child of that level, by the level's strategy: at
// the root stores restart alone (and a store's failure restarts only
// itself); in a group its strategy names its stores too. r.mu is held.
func (r *runner) takes(parent, z, a string) bool {
	if parent == "" && (r.kindAt(z) == "store" || r.kindAt(a) == "store") {
		return false
	}
	switch r.strategyOf(parent) {
	case cm.AllForOne:
		return true
	case cm.RestForOne:
		order := r.levelOrder(parent)
		zi, ai := slices.Index(order, leafName(z)), slices.Index(order, leafName(a))
		return zi >= 0 && ai >= 0 && zi < ai
	}
	return false
}

// restartCause names what may have restarted y (a ChildRestarted at at)
// since from: a failure of y or of a group above it, a failure of a
// sibling (of y or of a group above it) whose level's strategy takes it
// too, a RestartChild or StartChild of y or of a group above it, or a
// change of leadership (a new round starts the fenced children again, and
// may finish a plan the fence interrupted). It returns "" when nothing
// did. A request sent before from that may have been carried out after it
// (mayHaveStartedAfter: two RestartChild of y sent back to back, both
// before the first restart) counts too, but a request restarts y once:
// used holds the requests that have explained an earlier restart of y,
// and the one that explains this one is added. r.mu is held.
func (r *runner) restartCause(y string, from, at time.Time, used map[int]bool) string {
	up := ancestry(y)
	for _, e := range r.events {
		if e.Time.Before(from) || e.Time.After(at) {
			continue
		}
		switch e.Type {
		case cm.LeaderElected, cm.LeaderLost, cm.ShardAcquired, cm.ShardLost:
			return fmt.Sprintf("%s at %s", e.Type, stamp(e.Time))
		case cm.ChildFailed:
		default:
			continue
		}
		if slices.Contains(up, e.Child) {
			return fmt.Sprintf("the failure of %s at %s", e.Child, stamp(e.Time))
		}
		for _, a := range up {
			if parentPath(e.Child) == parentPath(a) && r.takes(parentPath(a), e.Child, a) {
				return fmt.Sprintf("the failure of %s at %s (%s)", e.Child, stamp(e.Time), r.strategyOf(parentPath(a)))
			}
		}
	}
	if m := fleetMember(y); m != "" && (r.backOnline(m, from, at) || r.cameBack(m, from, at, true) || r.fleet.builtBetween(m, from, at)) {
		// The fleet moved the member's group: its StartChild as the member
		// came back Online (or back from an outage, not yet said Online),
		// or a subtree built anew.
		return "the fleet's move of " + fleetName + "/" + m
	}
	// The requests last: one a failure or a change of leadership explains
	// is left for a later restart.
	for i, q := range r.reqs {
		if used[i] || q.at.After(at) || (q.at.Before(from) && !q.mayHaveStartedAfter(from)) {
			continue
		}
		if (q.do == DoRestart || q.do == DoStartChild) && slices.Contains(up, q.path) {
			used[i] = true
			return fmt.Sprintf("%s %s at %s", q.do, q.path, stamp(q.at))
		}
	}
	return ""
}

// checkTree checks the tree invariants over everything seen so far.
func (r *runner) checkTree() {
	if len(r.sc.Groups) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkRestartCauses()
	r.checkStoppedGroups()
	r.checkEscalations()
}

// checkRestartCauses: every ChildRestarted of a child in a tree has a
// cause its levels' strategies allow (restartCause): a RestForOne group
// restarts the failed child and those after it, never one before it nor
// a sibling group's children. r.mu is held.
func (r *runner) checkRestartCauses() {
	last := map[string]time.Time{}
	used := map[string]map[int]bool{} // per child, the requests that explained a restart of it
	for _, e := range r.events {
		if e.Type != cm.ChildRestarted {
			continue
		}
		from := last[e.Child]
		last[e.Child] = e.Time
		if used[e.Child] == nil {
			used[e.Child] = map[int]bool{}
		}
		if r.restartCause(e.Child, from, e.Time, used[e.Child]) != "" {
			continue
		}
		since := "the start"
		if !from.IsZero() {
			since = "its previous restart at " + stamp(from)
		}
		r.violateOnceLocked(fmt.Sprintf("cause/%s/%d", e.Child, e.Time.UnixNano()), Violation{
			Invariant: RestartUncaused, Child: e.Child, Time: e.Time,
			Detail: fmt.Sprintf("restarted at %s with no cause since %s that its groups' strategies allow (%s): no failure of it, of a group above it, or of a sibling whose strategy takes it, no RestartChild or StartChild of it or above it, no change of leadership",
				stamp(e.Time), since, r.strategies(e.Child)),
		})
	}
}

// strategies describes the strategy of every level above path.
func (r *runner) strategies(path string) string {
	var parts []string
	for _, a := range ancestry(path) {
		p := parentPath(a)
		name := p
		if name == "" {
			name = "root"
		}
		parts = append(parts, fmt.Sprintf("%s %s", name, r.strategyOf(p)))
	}
	return strings.Join(parts, ", ")
}

// checkStoppedGroups: a group stopped by ExhaustedStop (its ChildFailed,
// then its ChildStopped) stays stopped: none of its children's start
// calls runs after its ChildStopped until a StartChild (or RestartChild)
// of it, of a group above it or of a child in it, sent once its budget
// was spent (its ChildFailed). Children added
// into it afterwards are not judged: what AddChild does in a stopped group
// is not documented. r.mu is held.
func (r *runner) checkStoppedGroups() {
	failed := map[string]time.Time{} // each group's spent budget not yet followed by its stop
	for _, e := range r.events {
		if !r.isGroup(e.Child) {
			continue
		}
		switch e.Type {
		case cm.ChildFailed:
			failed[e.Child] = e.Time
			continue
		case cm.ChildStopped:
		default:
			continue
		}
		g, _ := r.sc.group(e.Child)
		failedAt, ok := failed[e.Child]
		if !ok || g.OnExhausted != cm.ExhaustedStop {
			continue
		}
		delete(failed, e.Child)
		stoppedAt := e.Time
		// Until the first step that may start it again: one sent once its
		// budget was spent may be answered after it has stopped, and one
		// sent before may have been taken after (mayHaveStartedAfter).
		until := time.Time{}
		for _, q := range r.reqs {
			if q.do != DoStartChild && q.do != DoRestart || q.at.Before(failedAt) && !q.mayHaveStartedAfter(stoppedAt) {
				continue
			}
			if within(q.path, g.Path) || within(g.Path, q.path) {
				until = q.at
				break
			}
		}
		for path := range r.children {
			if !within(path, g.Path) || path == g.Path {
				continue
			}
			if at, ok := r.addedAt[path]; ok && at.After(stoppedAt) {
				continue
			}
			for _, in := range r.journal.Of(path) {
				if !in.From.After(stoppedAt) || (!until.IsZero() && in.From.After(until)) {
					continue
				}
				r.violateOnceLocked(fmt.Sprintf("stopped/%s/%d", path, in.Inc), Violation{
					Invariant: StoppedGroupRan, Child: path, Time: in.From,
					Detail: fmt.Sprintf("incarnation %d started at %s, inside group %s stopped by ExhaustedStop at %s (%v), with no StartChild or RestartChild of it, above or in it since",
						in.Inc, stamp(in.From), g.Path, stamp(stoppedAt), r.lastFailure(g.Path, stoppedAt)),
				})
			}
		}
	}
}

// lastFailure is the error of path's last ChildFailed before at. r.mu is
// held.
func (r *runner) lastFailure(path string, at time.Time) error {
	var err error
	for _, e := range r.events {
		if e.Time.After(at) {
			break
		}
		if e.Type == cm.ChildFailed && e.Child == path {
			err = e.Err
		}
	}
	return err
}

// checkEscalations: only the root escalates a spent budget, so an
// escalation names one of the root's children (a group's failure goes up
// the tree as the failure of one child), never a group that stops when
// exhausted, and a group by Kind "group"; the EscalationError says the
// same. The other escalation, of a restart whose Shutdown outlives
// ShutdownTimeout, names the child at any depth, outside every group that
// stops on its own (which stops instead). r.mu is held.
func (r *runner) checkEscalations() {
	for _, e := range r.events {
		if e.Type != cm.Escalated {
			continue
		}
		child, kind := e.Child, e.Kind
		var esc *cm.EscalationError
		if errors.As(e.Err, &esc) {
			if esc.Child != e.Child {
				r.violateOnceLocked("escalation/event/"+child, Violation{Invariant: EscalationWrong, Child: child, Time: e.Time,
					Detail: fmt.Sprintf("the Escalated event names %q, its EscalationError %q", e.Child, esc.Child)})
			}
			child, kind = esc.Child, string(esc.Kind)
		} else {
			r.violateOnceLocked("escalation/err/"+child, Violation{Invariant: EscalationWrong, Child: child, Time: e.Time,
				Detail: fmt.Sprintf("the Escalated event's Err is %v, not an *EscalationError", e.Err)})
		}
		var what string
		g, isGroup := r.sc.group(child)
		switch {
		case !isGroup && esc != nil && strings.Contains(fmt.Sprint(esc.Err), "Shutdown did not return"):
			// "A restart at any depth whose Shutdown outlives
			// ShutdownTimeout escalates the manager", naming the child
			// itself, unless a group above it stops on its own
			// (ExhaustedStop): that group contains it. (No sentinel says
			// so; the message does.)
			stopGroup := ""
			for _, p := range ancestry(child)[1:] {
				if g, ok := r.sc.group(p); ok && g.OnExhausted == cm.ExhaustedStop {
					stopGroup = p
					break
				}
			}
			if stopGroup == "" {
				continue
			}
			what = fmt.Sprintf("escalates a Shutdown that hung inside group %s, whose OnExhausted is Stop: the group contains it", stopGroup)
		case strings.Contains(child, "/"):
			what = "names a child inside a group: only the root escalates, a group's child fails to its group"
		case isGroup && g.OnExhausted == cm.ExhaustedStop:
			what = "names a group whose OnExhausted is Stop: it stops instead"
		case isGroup && kind != "group":
			what = fmt.Sprintf("names group %s with Kind %q, not \"group\"", child, kind)
		case !isGroup && kind == "group":
			what = fmt.Sprintf("has Kind \"group\" for %s, not a group", child)
		default:
			continue
		}
		r.violateOnceLocked("escalation/"+child, Violation{Invariant: EscalationWrong, Child: child, Time: e.Time,
			Detail: fmt.Sprintf("the escalation at %s (%v) %s", stamp(e.Time), e.Err, what)})
	}
}

// violateOnceLocked is violateOnce, not excusable, called with r.mu held
// (vmu is taken after mu, as everywhere).
func (r *runner) violateOnceLocked(key string, v Violation) { r.violateOnce(key, v, false) }
