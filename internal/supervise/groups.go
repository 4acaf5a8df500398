package supervise

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// Groups. A group is a child whose record (Kind "group") stands for a level
// of its own: its children, supervised by its policy. Only hosted children
// have actors and incarnations; a group's state is read from theirs. As a
// node of the tree (node.go) a group answers what a walk asks of it, as a
// hosted child does: its state, health, status, what it starts and in which
// order, its stop and restart whole. Its failures are decided by its own
// level (handleFailed); the operations that span messages (a start round,
// a restart plan, a request, a stop: start.go, restart.go, lifecycle.go)
// run over the hosted children the node gives, in the order leaves gives.

// newGroupLevel is the level of rec, a group's record, a child of
// rec.lvl: the decl's zero fields inherit the parent level's.
func newGroupLevel(rec *childRecord, decl *GroupDecl) *level {
	parent := rec.lvl
	lvl := &level{s: parent.s, policy: decl.Policy, initialBackoff: decl.InitialBackoff, maxBackoff: decl.MaxBackoff,
		group: rec, parent: parent, depth: parent.depth + 1, stopOnExhausted: decl.StopOnExhausted, shard: decl.Shard}
	if lvl.shard <= 0 {
		lvl.shard = parent.shard // a group inside a group of AddShardedGroup is pinned with it
	}
	// Each zero field inherits the parent level's.
	lvl.policy.Strategy = cmp.Or(lvl.policy.Strategy, parent.policy.Strategy)
	lvl.policy.MaxRestarts = cmp.Or(lvl.policy.MaxRestarts, parent.policy.MaxRestarts)
	lvl.policy.RestartWindow = cmp.Or(lvl.policy.RestartWindow, parent.policy.RestartWindow)
	lvl.initialBackoff = cmp.Or(lvl.initialBackoff, parent.initialBackoff)
	lvl.maxBackoff = cmp.Or(lvl.maxBackoff, parent.maxBackoff)
	lvl.shutdownTimeout = cmp.Or(decl.ShutdownTimeout, parent.shutdownTimeout)
	lvl.probeTiming = healthTiming{
		interval:  cmp.Or(decl.HealthInterval, parent.probeTiming.interval),
		timeout:   cmp.Or(decl.HealthTimeout, parent.probeTiming.timeout),
		threshold: cmp.Or(decl.UnhealthyThreshold, parent.probeTiming.threshold),
	}
	lvl.s.probe.shorten(lvl.probeTiming.interval)
	return lvl
}

// stopContext is the context of a stop of children of lvl that lvl makes
// or is asked for (a restart plan of lvl, StopChild, RemoveChild or
// RestartChild of a child of lvl): it ends after lvl's shutdownTimeout.
func (lvl *level) stopContext() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), lvl.shutdownTimeout)
	_ = cancel // released when the deadline passes; the children hold it until then
	return ctx
}

// leaves is the hosted children that starting rec (a hosted child or a
// group) starts, in start order (inStartOrder). Plain runnables (never
// started), children stopped by StopChild and those whose lease this
// replica does not hold are left out (startable), and so is everything
// under a group stopped by StopChild.
func (s *root) leaves(rec *childRecord) []*childRecord {
	if !s.startable(rec) {
		return nil
	}
	return rec.node().appendStartOrder(nil, s.startable)
}

// startable reports whether a start of the tree (a group's, a restart
// plan's) starts r, or goes into it: a group not stopped, a hosted child
// not stopped, not a plain runnable, whose lease this replica holds.
func (s *root) startable(r *childRecord) bool {
	return !r.stopRequested && r.spec.Kind != actors.KindRunnable && s.leaseHeld(r)
}

// inStartOrder appends to out every hosted child under lvl in the order
// the level starts them, and a restart plan starts them again: its stores
// first, then the others, each in the order they were added, a group's
// children in its own start order where the group stands. keep, when not
// nil, prunes: a record it rejects is left out, a group with everything
// under it. It is the one "stores first" walk.
func (lvl *level) inStartOrder(out []*childRecord, keep func(*childRecord) bool) []*childRecord {
	for _, storesFirst := range [2]bool{true, false} {
		for _, c := range lvl.children {
			switch {
			case (c.spec.Kind == actors.KindStore) != storesFirst, keep != nil && !keep(c):
			default:
				out = c.node().appendStartOrder(out, keep)
			}
		}
	}
	return out
}

// hosted is every hosted child under rec (rec itself when it is one), in
// the order they were added, whatever their state.
func hosted(rec *childRecord) []*childRecord { return rec.node().appendHosted(nil) }

// subtree is every record under rec, groups included, rec first.
func subtree(rec *childRecord) []*childRecord { return rec.node().appendTree(nil) }

// inside reports whether rec is under g (or is g).
func inside(rec, g *childRecord) bool {
	for ; rec != nil; rec = rec.parent() {
		if rec == g {
			return true
		}
	}
	return false
}

// state is a group's state, read from its hosted children's: Stopped
// once stopped by StopChild or a spent budget (Stopping while they stop),
// else the least advanced of the children this replica runs now: Pending
// children whose lease it does not hold (a standby's, another shard's) are
// not counted, and Pending ones beside started ones (a start round still
// recovering the stores) make the group Starting.
func (lvl *level) state() supervisor.ChildState {
	s, g := lvl.s, lvl.group
	counts := map[supervisor.ChildState]int{}
	n, all := 0, 0
	for _, r := range lvl.appendHosted(nil) {
		all++
		if r.state == supervisor.StatePending && !s.leaseHeld(r) {
			continue
		}
		counts[r.state]++
		n++
	}
	switch {
	case g.stopRequested && counts[supervisor.StateStopping] > 0:
		return supervisor.StateStopping
	case g.stopRequested:
		return supervisor.StateStopped
	case all == 0:
		return supervisor.StateRunning // an empty group
	case n == 0:
		return supervisor.StatePending // nothing of it runs here now
	case counts[supervisor.StateStopping] > 0:
		return supervisor.StateStopping
	case counts[supervisor.StateBackingOff]+counts[supervisor.StateFailed] > 0:
		return supervisor.StateBackingOff
	case counts[supervisor.StateStarting] > 0:
		return supervisor.StateStarting
	case counts[supervisor.StatePending] == n:
		return supervisor.StatePending
	case counts[supervisor.StatePending] > 0:
		return supervisor.StateStarting
	case counts[supervisor.StateRunning] > 0:
		return supervisor.StateRunning
	default:
		return supervisor.StateStopped
	}
}

// status is the status of lvl's children, a group's with its own, read
// at now.
func (lvl *level) status(now time.Time) []supervisor.ChildStatus {
	out := make([]supervisor.ChildStatus, 0, len(lvl.children))
	for _, rec := range lvl.children {
		cs := supervisor.ChildStatus{
			Name: rec.spec.Name, Kind: rec.spec.Kind, State: rec.state, Restarts: rec.restarts(),
			Failures: rec.failures(), Healthy: rec.healthy, Message: rec.message(), LastError: rec.lastErr(), Since: rec.since,
		}
		rec.node().describe(&cs, now)
		out = append(out, cs)
	}
	return out
}

// since is when the group entered state, its state now (read at now):
// unchanged while Status reads the same state; else the latest of the last
// change of any child under it, the last addition or removal under it, g's
// own stop, and the last Status that read the old state. That last bound
// is needed: a group's state also moves with no child's record changing,
// when a lease or shard is won or lost (a Pending child counts only while
// its lease is held), and the move came after that Status read the old
// state.
func (lvl *level) since(state supervisor.ChildState, now time.Time) time.Time {
	g := lvl.group
	if lvl.shown == state {
		lvl.shownAt = now
		return g.since
	}
	changed := lvl.shownAt
	lvl.shown, lvl.shownAt = state, now
	if lvl.touched.After(g.since) {
		g.since = lvl.touched
	}
	if changed.After(g.since) {
		g.since = changed
	}
	for _, r := range lvl.appendHosted(nil) {
		if r.since.After(g.since) {
			g.since = r.since
		}
	}
	return g.since
}

// health is a group's own health, read from its children's records:
// healthy while every child under it is; the message names the first
// unhealthy one. A group stopped on its spent budget is healthy, and says
// so: a failing probe would have the kubelet restart the process, the
// escalation ExhaustedStop is there to avoid.
func (lvl *level) health() (bool, string) {
	if g := lvl.group; lvl.exhausted && g.stopRequested {
		return true, "stopped: " + g.message()
	}
	for _, c := range lvl.children {
		if healthy, msg := c.node().health(); !healthy {
			out := c.spec.Name + " is unhealthy"
			if msg != "" {
				out += ": " + msg
			}
			return false, out
		}
	}
	return true, ""
}

// appendGroupsHealth appends the lines of GetHealth of the groups under
// lvl to out, in tree order: each group's health as health reads it from
// the supervisor's records (its controllers' last probes).
func (lvl *level) appendGroupsHealth(out []actors.HealthStatus) []actors.HealthStatus {
	for _, rec := range lvl.children {
		out = rec.node().appendHealth(out)
	}
	return out
}

// appendGroupNames appends the paths of the groups under lvl to out, in
// the order appendGroupsHealth lists their lines: the names of those lines.
func (lvl *level) appendGroupNames(out []string) []string {
	for _, st := range lvl.appendGroupsHealth(nil) {
		out = append(out, st.Name)
	}
	return out
}

// budgetStatus is the group's own supervision and the budget its
// children have spent within the window, now.
func (lvl *level) budgetStatus() *supervisor.GroupStatus {
	s, g := lvl.s, lvl.group
	gs := &supervisor.GroupStatus{Strategy: lvl.policy.Strategy, MaxRestarts: lvl.policy.MaxRestarts,
		RestartWindow: lvl.policy.RestartWindow, ShutdownTimeout: lvl.shutdownTimeout,
		HealthInterval: lvl.probeTiming.interval, HealthTimeout: lvl.probeTiming.timeout, UnhealthyThreshold: lvl.probeTiming.threshold,
		StopOnExhausted: lvl.stopOnExhausted, Exhausted: lvl.exhausted && g.stopRequested}
	cutoff := s.clock.now().Add(-lvl.policy.RestartWindow)
	for _, c := range lvl.children {
		n := 0
		for _, at := range c.budget() {
			if at.After(cutoff) {
				n++
			}
		}
		gs.Spent = max(gs.Spent, n)
	}
	return gs
}

// giveUp handles a spent budget of member, a child of lvl: at the root
// the manager escalates; in a group the group has failed (fail).
func (lvl *level) giveUp(member *childRecord, err error) {
	if lvl.parent == nil {
		lvl.s.escalate(member, err)
		return
	}
	lvl.fail(fmt.Errorf("%s %q spent its restart budget (%d in %s): %w",
		member.spec.Kind, member.spec.Name, lvl.policy.MaxRestarts, lvl.policy.RestartWindow, err))
}

// fail records and publishes the failure of lvl's group, for err (its
// error names the group), which then either stops (ExhaustedStop: a stop
// for good with no requester; StartChild starts it again) or fails to its
// parent level as one child (ExhaustedEscalate), which decides again
// (handleFailed).
func (lvl *level) fail(err error) {
	s, g := lvl.s, lvl.group
	gerr := fmt.Errorf("%s %q: %w", g.spec.Kind, g.spec.Name, err)
	g.hist().failures++
	g.hist().lastErr = gerr
	g.healthy = false
	g.hist().message = gerr.Error()
	s.cfg.Logger.Error("group failed", "child", g.spec.Name, "err", gerr)
	s.publish(supervisor.ChildFailed, g, gerr)
	if lvl.stopOnExhausted {
		lvl.exhausted = true
		(&stopRequest{s: s, rec: g}).begin()
		return
	}
	lvl.parent.handleFailed(g, gerr)
}

// contain fails the nearest group from lvl up that stops on its own
// (ExhaustedStop) with err, a hung Shutdown of one of lvl's children, so
// that the group stops instead of the manager; false when no such group
// is above lvl.
func (lvl *level) contain(err error) bool {
	for l := lvl; l != nil; l = l.parent {
		if l.stopOnExhausted {
			l.fail(err)
			return true
		}
	}
	return false
}

// resetBudgets gives every child under g a fresh budget and backoff: the
// group starts over, as an OTP supervisor restarted by its parent does.
// What is under a child that left holds (a start by hand left it as it
// is: handStart) keeps its own.
func resetBudgets(g *childRecord, left map[*childRecord]bool) {
	for _, r := range subtree(g) {
		if r == g || r.x == nil {
			continue
		}
		kept := false
		for x := r; x != g && !kept; x = x.parent() {
			kept = left[x]
		}
		if !kept {
			r.x.budget, r.x.backoffStep = nil, 0
		}
	}
}

// touch notes, in lvl and every level above it, that a child was added
// under it or removed at now (a group's since; the root's is not read).
func (lvl *level) touch(now time.Time) {
	for l := lvl; l != nil; l = l.parent {
		l.touched = now
	}
}

// backoffFor is how long rec waits before it starts again on a level
// whose restart window and backoff these are (level.backoff); ran
// is how long its current incarnation has run, if it started (rec.started).
func backoffFor(rec *childRecord, ran time.Duration, window, initial, maxBackoff time.Duration, jitter float64) time.Duration {
	x := rec.hist()
	if rec.started && ran >= window {
		x.backoffStep = 0
	}
	d := maxBackoff
	if x.backoffStep < 62 {
		if exp := initial << x.backoffStep; exp > 0 && exp < maxBackoff && exp>>x.backoffStep == initial {
			d = exp
		}
	}
	x.backoffStep++
	return d - time.Duration(float64(d)*0.2*jitter)
}

// checkBackoffs refuses a group whose InitialBackoff, its own or
// inherited, exceeds its MaxBackoff, its own or inherited (the level would
// silently wait MaxBackoff): specs is what a Start or an AddChild brings,
// groups before their children.
func checkBackoffs(top *level, reg *registry, specs []childactor.Spec) error {
	type pair struct{ initial, max time.Duration }
	eff := map[string]pair{}
	lookup := func(path string) pair {
		if p, ok := eff[path]; ok {
			return p
		}
		lvl := top
		if g := reg.groupNamed(path); g != nil {
			lvl = g
		}
		return pair{lvl.initialBackoff, lvl.maxBackoff}
	}
	for _, spec := range specs {
		d, ok := spec.Impl.(*GroupDecl) // a group's spec (specs), whatever its Kind
		if !ok {
			continue
		}
		p := lookup(spec.Group)
		mine := pair{cmp.Or(d.InitialBackoff, p.initial), cmp.Or(d.MaxBackoff, p.max)}
		if mine.initial > mine.max {
			return fmt.Errorf("%s %q: supervision.initialBackoff %s (its own or inherited) exceeds supervision.maxBackoff %s (its own or inherited)",
				spec.Kind, spec.Name, mine.initial, mine.max)
		}
		eff[spec.Name] = mine
	}
	return nil
}
