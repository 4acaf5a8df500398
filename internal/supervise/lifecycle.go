package supervise

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

func (s *root) onStopChild(m supervisor.StopChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(describe(m), action(m), m.Name)
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	(&stopRequest{s: s, rec: rec, replyTo: replyTo}).begin()
}

// stopStage is where a stop for good is, in this order.
type stopStage uint8

const (
	stopStopping stopStage = iota // its hosted children are shutting down
	stopDone                      // they have stopped: the requester is answered
)

var stopStageNames = [...]string{"stopping", "done"}

func (st stopStage) String() string { return stopStageNames[st] }

// stopMoves is every move of a stop for good's stage: stopping, then done.
var stopMoves = map[stopStage][]stopStage{stopStopping: {stopDone}, stopDone: nil}

// become is the one way a stop for good's stage moves (moveStage).
func (r *stopRequest) become(to stopStage) { r.stage = moveStage("stop", r.stage, to, stopMoves) }

// stopRequest is a stop for good in progress: a StopChild or RemoveChild,
// or a group stopped on its spent budget (no requester). The child is out
// of supervision and shutting down; once it has stopped the requester is
// answered (a RemoveChild's child removed first).
type stopRequest struct {
	s       *root
	stage   stopStage
	rec     *childRecord
	remove  bool
	replyTo *actor.PID
	wait    *barrier
}

// begin takes r's child (every child of a group) out of supervision, any
// restart plan and any lifecycle request (which it ends, saying why:
// requests.interrupt), and shuts it down: nothing starts it again until a
// StartChild or RestartChild of it, and nothing ever once removed.
func (r *stopRequest) begin() {
	s, rec := r.s, r.rec
	why := supervisor.ErrChildStopped
	if r.remove {
		why = supervisor.ErrChildRemoved
	}
	s.requests.interrupt(rec, why)
	rec.node().setStopped(true, s.clock.now(), nil)
	s.quiesce(func(x *childRecord) bool { return inside(x, rec) })
	recs := hosted(rec)
	for _, x := range recs {
		if x.state == supervisor.StatePending {
			s.setState(x, supervisor.StateStopped)
		}
	}
	if r.wait = s.stopAll(r, recs, rec.lvl.stopContext()); r.wait == nil {
		r.stopped()
	}
}

func (r *stopRequest) current(b *barrier) bool { return r.stage == stopStopping && r.wait == b }
func (r *stopRequest) settled(*barrier, error) { r.stopped() }

// stopped ends the request, its child stopped.
func (r *stopRequest) stopped() {
	s, rec := r.s, r.rec
	r.become(stopDone)
	r.wait = nil
	rec.node().stopEnded()
	if !r.remove {
		s.respond(r.replyTo, nil, nil)
		return
	}
	if !s.reg.known(rec) {
		s.respond(r.replyTo, nil, nil) // removed meanwhile by an earlier RemoveChild
		return
	}
	rec.lvl.children = deleteRecord(rec.lvl.children, rec)
	rec.lvl.touch(s.clock.now())
	// A group goes with everything under it, its children before it.
	under := subtree(rec)
	for i := len(under) - 1; i >= 0; i-- {
		x := under[i]
		s.reg.remove(x)
		x.node().drop()
		if h := hookOf(x.spec); h != nil {
			_ = h.InTree(TreeRemoved, x.spec.Name)
		}
		s.publish(supervisor.ChildRemoved, x, nil)
	}
	s.respond(r.replyTo, nil, nil)
}

// Facade plumbing: TreeEvent is what the tree did with a child, as its
// TreeHook hears it.
type TreeEvent uint8

// The tree events.
const (
	// TreeAdding: an add (Start, AddChild) brings the child into the tree
	// at path, every other check of the add passed. An error refuses the
	// add whole: nothing of it is added, and the add is answered with it.
	TreeAdding TreeEvent = iota
	// TreeRefused: an add whose TreeAdding the child accepted was refused
	// all the same (another child of the add refused it): the child is not
	// in the tree.
	TreeRefused
	// TreeRemoved: the child left the tree for good (a RemoveChild of it
	// or of a group above it), before the RemoveChild is answered, so
	// before any AddChild that follows it, and whether or not a subscriber
	// keeps up with ChildRemoved.
	TreeRemoved
	// TreeManagerStopped: the manager has stopped (Stopped or Failed),
	// every child stopped, before Done closes; said to each child in the
	// tree.
	TreeManagerStopped
	// TreeStarting: a StartChild or RestartChild is to start the child, or
	// something under it, by hand. An error refuses: the request is
	// answered with it if it names the child or a child under it (the
	// child itself is asked, and every group above it); else the child is
	// left as it is, with everything under it, and the rest is started.
	// Never said of a start the tree makes itself (a start round, a restart
	// plan).
	TreeStarting
)

var treeEventNames = [...]string{"adding", "refused", "removed", "manager stopped", "starting"}

func (e TreeEvent) String() string { return treeEventNames[e] }

// Facade plumbing: TreeHook is a child (its Spec.Impl, or a group's
// GroupDecl.Hook) that the tree tells, in the mailbox, what became of it:
// whether an add brought it in or was refused, that it left, that the
// manager stopped, that a start by hand is to start it. What the child
// knows of its place is decided where the tree is, in the order the tree
// changes, not guessed by whoever sent a message (which may never learn
// the answer). A fleet's group is one (a
// fleet runs once in its manager's tree), its runner (its members go with
// it, or with the manager), and a fleet's member cluster's group (an add
// of a config replaced meanwhile, or of a Cluster dropped, is refused, and
// so is a start by hand while the cluster is Offline). InTree must not
// block; its error counts for TreeAdding and TreeStarting only.
type TreeHook interface {
	InTree(ev TreeEvent, path string) error
}

// hookOf is spec's TreeHook, nil if it has none. A group's declaration
// is one (GroupDecl.InTree), whether or not it was given a Hook.
func hookOf(spec childactor.Spec) TreeHook {
	h, _ := spec.Impl.(TreeHook)
	return h
}

// InTree passes what the tree did with the group to its Hook, if any: a
// group is told as a hosted child is, without a case of its own.
func (d *GroupDecl) InTree(ev TreeEvent, path string) error {
	if d.Hook == nil {
		return nil
	}
	return d.Hook.InTree(ev, path)
}

// admit tells each child among specs with a TreeHook that an add brings it
// in (TreeAdding), in order. At the first refusal, those told already hear
// TreeRefused, and the refusal is returned: the add is refused whole.
func admit(specs []childactor.Spec) error {
	var told []childactor.Spec
	for _, spec := range specs {
		h := hookOf(spec)
		if h == nil {
			continue
		}
		if err := h.InTree(TreeAdding, spec.Name); err != nil {
			for i := len(told) - 1; i >= 0; i-- {
				_ = hookOf(told[i]).InTree(TreeRefused, told[i].Name)
			}
			return err
		}
		told = append(told, spec)
	}
	return nil
}

// treeStopped tells every child and group in the tree with a TreeHook that
// the manager has stopped.
func (s *root) treeStopped() {
	for _, rec := range s.reg.byName {
		if h := hookOf(rec.spec); h != nil {
			_ = h.InTree(TreeManagerStopped, rec.spec.Name)
		}
	}
}

func (s *root) onAddChild(m supervisor.AddChild, replyTo *actor.PID) {
	if p := s.state.phase(); p != supervisor.PhaseRunning {
		s.respond(replyTo, nil, fmt.Errorf("AddChild: %w (phase %s)", supervisor.ErrNotRunning, p))
		return
	}
	// Naming may call user code (Name, GetHealth): do it off the mailbox.
	mode, timeout, shardOf := s.cfg.Mode, s.cfg.Timing.HealthTimeout, s.cfg.ShardOf
	if !s.shards.sharded() {
		shardOf = nil
	}
	if s.cfg.Tree != nil {
		if vals, ok := s.cfg.Tree(m.Parent, m.Runnable); ok {
			s.addTree(m, vals, mode, timeout, shardOf, replyTo)
			return
		}
	}
	go func() {
		spec, err := classify(mode, m.Runnable)
		if err == nil {
			spec.Name = m.Name
			if spec.Name == "" {
				spec.Name, err = childactor.ResolveName(m.Runnable, timeout)
			}
			if err == nil && spec.Name == "" {
				err = fmt.Errorf("%s %T has no name: give AddChild a Name: %w", spec.Kind, m.Runnable, CheckName("", spec.Kind, m.Parent))
			}
			if err == nil {
				err = CheckName(spec.Name, spec.Kind, m.Parent)
			}
		}
		if err == nil && m.Parent != "" {
			spec.Name = m.Parent + "/" + spec.Name
			spec.Group = m.Parent
		}
		// Pinned by its path, as a controller of the same name in the same
		// group is when added before Start (the facade's specs): one rule,
		// ShardOf(path, S), whenever it was added.
		if err == nil && spec.Kind == actors.KindController && shardOf != nil {
			spec.Shard = shardOf(spec.Name)
		}
		s.self.send(childNamed{spec: spec, err: err, parent: m.Parent, replyTo: replyTo})
	}()
}

// addTree is an AddChild of a group: vals (a GroupDecl, then its
// children) are classified and named off the mailbox, as one child is.
func (s *root) addTree(m supervisor.AddChild, vals []any, mode Mode, timeout time.Duration, shardOf func(string) int, replyTo *actor.PID) {
	if m.Name != "" {
		s.respond(replyTo, nil, fmt.Errorf("AddChild: a group is named by NewGroup, not by AddChild's Name (%q)", m.Name))
		return
	}
	go func() {
		specs, err := Specs(mode, vals, timeout)
		if err == nil && shardOf != nil {
			for i := range specs {
				if specs[i].Kind == actors.KindController {
					specs[i].Shard = shardOf(specs[i].Name)
				}
			}
		}
		named := childNamed{err: err, parent: m.Parent, tree: specs, replyTo: replyTo}
		if len(specs) > 0 {
			named.spec = specs[0]
		}
		s.self.send(named)
	}()
}

// childNamed: an AddChild's child has been named (or could not be). For a
// group, tree is the group's spec and those under it, depth first, and
// spec is tree[0].
type childNamed struct {
	spec    childactor.Spec
	tree    []childactor.Spec
	err     error
	parent  string
	replyTo *actor.PID
}

func (s *root) onChildNamed(m childNamed) {
	err := m.err
	if p := s.state.phase(); err == nil && p != supervisor.PhaseRunning {
		err = fmt.Errorf("%w (phase %s)", supervisor.ErrNotRunning, p)
	}
	if err == nil && m.parent != "" {
		if g := s.reg.groupNamed(m.parent); g == nil {
			err = fmt.Errorf("%w: no group %q", supervisor.ErrUnknownChild, m.parent)
		} else if g.group.stopRequested {
			err = fmt.Errorf("group %q is stopped (%w)", m.parent, supervisor.ErrChildStopped)
		}
	}
	if err == nil {
		// Every path the child brings (a group's, at any depth), not only
		// its own: each must be new to the manager.
		paths := m.tree
		if paths == nil {
			paths = []childactor.Spec{m.spec}
		}
		for _, spec := range paths {
			if s.reg.taken(spec.Name) {
				err = fmt.Errorf("%w: a child named %q already exists", supervisor.ErrDuplicateChild, spec.Name)
				break
			}
		}
		if err == nil {
			err = checkBackoffs(s.tree, &s.reg, paths)
		}
		if err == nil {
			err = admit(paths) // last: a child told it is added is added
		}
	}
	if err != nil {
		s.respond(m.replyTo, nil, fmt.Errorf("AddChild: %w", err))
		return
	}
	if m.tree != nil {
		s.startTree(m)
		return
	}
	rec := s.addRecord(m.spec)
	if !s.leaseHeld(rec) {
		// Pinned to a shard this replica does not hold: it starts when the
		// shard is acquired, here or on another replica.
		s.respond(m.replyTo, nil, nil)
		return
	}
	r := s.requests.open(s, rec, "AddChild", m.replyTo)
	r.become(requestStarting) // nothing to stop: it has never run
	r.recs, r.next = []*childRecord{rec}, 1
	r.wait = s.startIncarnation(r, rec)
}

// startTree adds a group and everything under it, then starts its
// children one after another in the order a group starts again: at each
// level its stores first (leaves). Those pinned to a shard this replica
// does not hold start when it is acquired.
func (s *root) startTree(m childNamed) {
	var top *childRecord
	for i, spec := range m.tree {
		rec := s.addRecord(spec)
		if i == 0 {
			top = rec
		}
	}
	r := s.requests.open(s, top, "AddChild", m.replyTo)
	r.become(requestStarting) // nothing to stop: it has never run, and a first start is no restart
	r.recs = s.leaves(top)
	r.queue()
	r.step()
}

func (s *root) onRemoveChild(m supervisor.RemoveChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(describe(m), action(m), m.Name)
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	(&stopRequest{s: s, rec: rec, remove: true, replyTo: replyTo}).begin()
}

func deleteRecord(recs []*childRecord, rec *childRecord) []*childRecord {
	for i, r := range recs {
		if r == rec {
			return append(recs[:i], recs[i+1:]...)
		}
	}
	return recs
}

// classify says what v is for a manager in mode; the Spec it returns has
// no name yet. A ControllerManager hosts Controllers, Webhooks and Stores; a
// WebhookManager hosts Webhooks; anything else that is a Runnable is a plain
// runnable, only shut down.
func classify(mode Mode, v any) (childactor.Spec, error) {
	if v == nil {
		return childactor.Spec{}, fmt.Errorf("child is nil")
	}
	kind := actors.KindRunnable
	switch {
	case mode == ModeControllers && isController(v):
		kind = actors.KindController
	case mode != ModeBase && isWebhook(v):
		kind = actors.KindWebhook
	case mode == ModeControllers && isStore(v):
		kind = actors.KindStore
	default:
		if _, ok := v.(actors.Runnable); !ok {
			return childactor.Spec{}, fmt.Errorf("%T is neither a Controller, a Webhook, a Store nor a Runnable", v)
		}
	}
	return childactor.Spec{Kind: kind, Impl: v}, nil
}

func isController(v any) bool { _, ok := v.(actors.Controller); return ok }
func isWebhook(v any) bool    { _, ok := v.(actors.Webhook); return ok }
func isStore(v any) bool      { _, ok := v.(actors.Store); return ok }
