package supervise

import (
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// A node is a child of a level as the tree sees it: a hosted child (a
// leaf: an actor, incarnations, a state of its own) or a group (a level of
// its own, whose state is read from the children under it). Each kind
// answers for itself what a walk of the tree asks of it; node is the one
// place that tells them apart, as suture's Supervisor is a Service among
// its own services. What only a level does (decide a failure, order a
// start) is on the level (handleFailed, inStartOrder).
type node interface {
	// appendHosted appends the hosted children under it, in the order they
	// were added, whatever their state: a leaf itself.
	appendHosted(out []*childRecord) []*childRecord
	// appendTree appends every record under it, groups included, itself
	// first.
	appendTree(out []*childRecord) []*childRecord
	// appendStartOrder appends the hosted children under it in the order
	// it starts them (inStartOrder), pruned by keep: a leaf itself (its
	// level has kept it).
	appendStartOrder(out []*childRecord, keep func(*childRecord) bool) []*childRecord
	// state is its state now.
	state() supervisor.ChildState
	// health is its health as the supervisor's records hold it.
	health() (bool, string)
	// describe completes cs, its status as its record holds it, at now.
	describe(cs *supervisor.ChildStatus, now time.Time)
	// appendHealth appends its own line of GetHealth, and those of the
	// groups under it: a group's (a leaf's are its probes').
	appendHealth(out []actors.HealthStatus) []actors.HealthStatus
	// setStopped marks it, and everything under it, stopped by StopChild
	// or RemoveChild (or no longer: a start on request), at now. within,
	// when not nil, prunes: a child under it that within rejects is left
	// as it is, with everything under it.
	setStopped(stopped bool, now time.Time, within func(*childRecord) bool)
	// stopEnded is a StopChild or RemoveChild of it having stopped every
	// hosted child under it: a group says so itself (a hosted child's own
	// stop has said it).
	stopEnded()
	// restarted counts a restart of the whole: a group's is counted once,
	// when its children stop (a hosted child's counts when its incarnation
	// starts).
	restarted()
	// restartWhole is its restart by a plan of its level: what the plan
	// starts again is appended to out. A group's restart is counted and it
	// starts over (its children's budgets reset), as an OTP supervisor
	// restarted by its parent does.
	restartWhole(out []*childRecord) []*childRecord
	// drop forgets it, removed: a hosted child leaves the flat index and
	// its actor stops.
	drop()
}

// node is rec as the tree sees it: its group's level, or the leaf it is.
func (rec *childRecord) node() node {
	if rec.sub != nil {
		return rec.sub
	}
	return leaf{rec}
}

// parent is the group rec is in, nil at the root.
func (rec *childRecord) parent() *childRecord { return rec.lvl.group }

// leaf is a hosted child as a node: a pointer in a struct, held in the
// interface as it is (no allocation).
type leaf struct{ rec *childRecord }

func (l leaf) appendHosted(out []*childRecord) []*childRecord { return append(out, l.rec) }
func (l leaf) appendTree(out []*childRecord) []*childRecord   { return append(out, l.rec) }
func (l leaf) appendStartOrder(out []*childRecord, _ func(*childRecord) bool) []*childRecord {
	return append(out, l.rec)
}
func (l leaf) state() supervisor.ChildState                                 { return l.rec.state }
func (l leaf) health() (bool, string)                                       { return l.rec.healthy, l.rec.message() }
func (l leaf) describe(*supervisor.ChildStatus, time.Time)                  {}
func (l leaf) appendHealth(out []actors.HealthStatus) []actors.HealthStatus { return out }
func (l leaf) setStopped(stopped bool, _ time.Time, _ func(*childRecord) bool) {
	l.rec.stopRequested = stopped
}
func (l leaf) stopEnded()                                     {}
func (l leaf) restarted()                                     {}
func (l leaf) restartWhole(out []*childRecord) []*childRecord { return append(out, l.rec) }

func (l leaf) drop() {
	s := l.rec.lvl.s
	s.reg.dropHosted(l.rec)
	s.obs.removeWebhook(l.rec)
	if l.rec.pid != nil {
		s.ctx.Stop(l.rec.pid)
	}
}

// A group as a node: its level answers.

func (lvl *level) appendHosted(out []*childRecord) []*childRecord {
	for _, c := range lvl.children {
		out = c.node().appendHosted(out)
	}
	return out
}

func (lvl *level) appendTree(out []*childRecord) []*childRecord {
	out = append(out, lvl.group)
	for _, c := range lvl.children {
		out = c.node().appendTree(out)
	}
	return out
}

func (lvl *level) appendStartOrder(out []*childRecord, keep func(*childRecord) bool) []*childRecord {
	return lvl.inStartOrder(out, keep)
}

func (lvl *level) describe(cs *supervisor.ChildStatus, now time.Time) {
	cs.State = lvl.state()
	cs.Since = lvl.since(cs.State, now)
	cs.Children = lvl.status(now)
	cs.Group = lvl.budgetStatus()
	cs.Healthy, cs.Message = lvl.health()
}

func (lvl *level) appendHealth(out []actors.HealthStatus) []actors.HealthStatus {
	st := actors.HealthStatus{Name: lvl.group.spec.Name}
	st.Healthy, st.Message = lvl.health()
	return lvl.appendGroupsHealth(append(out, st))
}

func (lvl *level) setStopped(stopped bool, now time.Time, within func(*childRecord) bool) {
	lvl.group.stopRequested = stopped
	lvl.touched = now // its state is Stopping or Stopped from now, or no longer (since)
	if !stopped {
		lvl.exhausted = false
	}
	for _, c := range lvl.children {
		if within == nil || within(c) {
			c.node().setStopped(stopped, now, within)
		}
	}
}

func (lvl *level) stopEnded() {
	s, g := lvl.s, lvl.group
	g.since = s.clock.now()
	s.publish(supervisor.ChildStopped, g, nil)
}

func (lvl *level) restarted() {
	lvl.group.hist().restarts++
	lvl.s.publish(supervisor.ChildRestarted, lvl.group, nil)
}

func (lvl *level) restartWhole(out []*childRecord) []*childRecord {
	s, g := lvl.s, lvl.group
	leaves := s.leaves(g)
	if !lvl.restartPending(leaves) {
		lvl.restarted()
	}
	g.markStarted(&s.clock)
	resetBudgets(g, nil)
	return append(out, leaves...)
}

// restartPending reports whether a plan of a level above has restarted
// lvl's group whole already (and counted it) and has started none of its
// children (leaves) again: a plan made now that takes the group in, and
// that plan's rest with it, carries on that restart rather than making
// another. Restarts stays runs − 1 for a group as for a hosted child.
func (lvl *level) restartPending(leaves []*childRecord) bool {
	taken := false
	for _, r := range leaves {
		if r.state.Active() {
			return false
		}
		if p := r.plan; p != nil && p.stage != planDone && encloses(p.lvl, lvl) {
			taken = true
		}
	}
	return taken
}

// drop: a group's record leaves with the index (lifecycle.go's removal);
// its level has nothing else to let go.
func (lvl *level) drop() {}
