package controllermanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// groupState is what a member's loop knows of its group in the manager's
// tree.
type groupState int

const (
	groupAbsent   groupState = iota // not in the tree
	groupRunning                    // added or started
	groupStopped                    // stopped by the loop (Offline)
	groupUnknown                    // a request's answer was lost (its context ended), or it was cut short: ask the tree
	groupStarting                   // found Starting in the tree (a start whose answer was lost): read again at each step
)

// member is one member cluster of a fleet. Its loop (run), one at a time,
// is the only goroutine that acts on its group (the add or start it waits
// for beside its probes, awaitStart, is sent from a goroutine of its own
// that touches nothing of the member): engage and disengage only record
// what is wanted and wake it. An incarnation's Shutdown waits for its
// loops before the runner can Run again, so the loop-owned fields below
// pass from one loop to the next without a lock.
type member struct {
	f    *Fleet
	name string
	path string        // "<fleet path>/<name>"
	kick chan struct{} // wakes the loop; capacity 1
	// events orders the cluster's events: engage holds it from its change
	// of want until its ClusterEngaged is out, the loop around each event
	// it publishes (announce, ClusterDisengaged).
	events sync.Mutex
	// left is closed once the member, leaving, has published its
	// ClusterDisengaged (Fleet.left): what an engage of its name waits on.
	// Made by Fleet.leave; f.mu.
	left chan struct{}

	// Guarded by f.mu: what the provider wants, and the status.
	want   *rest.Config
	key    string // configKey(want)
	gen    uint64 // bumped by every engage that changes want
	gone   bool   // disengaged
	status ClusterStatus
	// stopped is why its group stopped on its own (OnExhausted Stop: a
	// spent budget, a contained hung Shutdown), from the group's
	// ChildFailed (groupFailed); nil again once a child under the group
	// starts (subtreeMoved), the loop sees the cluster Offline, or the
	// group is removed (removed).
	stopped error
	// stopping: the group's stop on its own (stopped) is still under way,
	// a Shutdown it waits for not yet returned; the member is said Failed
	// once the group has stopped (settleStop). False when the failure is
	// itself a Shutdown that did not return (an *UnstoppedError): that
	// stop is not waited for.
	stopping bool
	notedAt  uint64 // f.events when an event (or a removal) last set or cleared stopped (noted)
	// regroup: the group was moved by someone else than the loop, and
	// the loop reads the tree for it: the fleet was removed and added again
	// (removedFromTree), the group removed by hand, or started while the
	// member is Offline (a restart plan of the fleet or of a group above
	// it that took the group before the loop stopped it: a start by hand
	// is refused from the loop's verdict on, memberAdmission), a move the
	// loop never makes (subtreeMoved).
	regroup bool
	// awaiting: the loop waits for its group's AddChild or StartChild
	// (awaitStart). The group's admission (memberAdmission) refuses the
	// add once the loop has given up on it (Offline, disengaged or rotated
	// meanwhile), so an add the supervisor has not taken yet is never taken
	// after; and it refuses a start by hand while the member is Offline,
	// unless it is the loop's own, made on the verdict that the cluster
	// answers before it says Online.
	awaiting bool
	// failing is the loop's verdict that the cluster does not answer (its
	// probes failed for FailureThreshold, or its first one failed), with
	// why, mirrored from online and cause at each probe for the admission:
	// the status says Offline only once the group has stopped, and a start
	// by hand taken between the two would run the group on, unseen by the
	// loop. Nil while it answers.
	failing error

	// Owned by the loop.
	applied        uint64 // the gen cluster was built from; 0: none
	cluster        *memberCluster
	group          groupState
	online         bool   // the probes' verdict, with the thresholds
	cause          error  // the probe failure that made it Offline
	failed         error  // the applied config or build cannot make a subtree
	pending        *Group // built for the applied config, not yet added
	announced      ClusterState
	failingSince   time.Time        // first failed probe while Online; zero while answering
	answeringSince time.Time        // first answered probe while Offline; zero while failing
	tick           <-chan time.Time // the loop's probe ticks, also probed on while an add waits
	offlineCause   error            // a stop the loop sent on its Offline verdict, not yet said
}

func newMember(f *Fleet, name string) *member {
	p := f.pathLocked() + "/" + name
	return &member{f: f, name: name, path: p, kick: make(chan struct{}, 1),
		status: ClusterStatus{Name: name, Path: p, State: ClusterStateEngaging}}
}

// wake makes the loop look at what is wanted again.
func (mb *member) wake() {
	select {
	case mb.kick <- struct{}{}:
	default:
	}
}

// run is the member's loop: it moves the cluster's group towards what is
// wanted (engaged on its latest config, running while Online, removed once
// disengaged), probes every ProbePeriod, and waits, for a wake, a probe
// tick or, after a request the manager refused while not Running, its next
// phase. It returns when ctx ends or once the cluster is disengaged and its
// subtree removed.
func (mb *member) run(ctx context.Context) {
	f := mb.f
	ticker := f.clock().NewTicker(f.spec.ProbePeriod.Duration)
	defer ticker.Stop()
	mb.tick = ticker.C()
	settle := 0 // steps taken at once since the last wait
	for {
		phase := f.phaseSignal()
		if mb.step(ctx) {
			return
		}
		// A group whose state a lost answer left unknown, or one the tree
		// had after all, is looked at again at once, a few times, rather
		// than at the next probe.
		if mb.unsettled() && settle < 3 && ctx.Err() == nil {
			settle++
			continue
		}
		settle = 0
		select {
		case <-ctx.Done():
			return
		case <-mb.kick:
		case <-phase:
		case <-mb.tick:
			mb.probe(ctx, false)
		}
	}
}

// unsettled reports whether the group is not where the verdict wants it
// for a reason another step may clear at once.
func (mb *member) unsettled() bool {
	if mb.cluster == nil || mb.failed != nil {
		return false
	}
	return mb.group == groupUnknown || (mb.online && mb.group == groupStopped && mb.stoppedItself() == nil)
}

// step takes the next steps towards what is wanted; true once the cluster
// is disengaged and gone.
func (mb *member) step(ctx context.Context) bool {
	f := mb.f
	f.mu.Lock()
	gone, gen, want := mb.gone, mb.gen, mb.want
	f.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	if gone {
		if !mb.fenceAndRemove(ctx) {
			return false
		}
		mb.forget()
		// mb.events is held from here until ClusterDisengaged is out: an
		// engage of the same name waits for it (engage locks the events of
		// the member it finds, in members or leaving), so that
		// ClusterDisengaged comes before the next ClusterEngaged, and the
		// series deleted here is never the next member's. The member
		// leaves members first: whoever sees ClusterDisengaged finds no
		// such cluster.
		mb.events.Lock()
		defer mb.events.Unlock()
		f.mu.Lock()
		if !mb.gone { // engaged again meanwhile
			f.mu.Unlock()
			return false
		}
		f.leave(mb)
		f.mu.Unlock()
		mb.disengaged()
		f.mu.Lock()
		f.left(mb)
		f.mu.Unlock()
		return true
	}
	if gen != mb.applied {
		if !mb.fenceAndRemove(ctx) { // a rotation: apply builds a new Cluster
			return false
		}
		mb.apply(ctx, want, gen)
	}
	if ctx.Err() != nil {
		return false
	}
	mb.reconcile(ctx)
	return false
}

// disengaged deletes the member's ready series and publishes its
// ClusterDisengaged; mb.events is held.
func (mb *member) disengaged() {
	mb.f.setReady(mb.name, false, true)
	mb.f.publish(ClusterDisengaged, mb.path, nil)
}

// forget ends the cluster's Context and drops what was built from its
// config, so that the next step builds it again.
func (mb *member) forget() {
	if mb.cluster != nil {
		mb.cluster.cancel()
		mb.cluster = nil
	}
	mb.applied = 0
	mb.announced = ""
	mb.pending = nil
	mb.offlineCause = nil
	if mb.group != groupAbsent {
		mb.group = groupUnknown
	}
}

// removed: its group has left the tree; why it stopped on its own, if it
// did, goes with it.
func (mb *member) removed() {
	mb.f.mu.Lock()
	mb.stopped, mb.stopping = nil, false
	mb.f.noted(mb)
	mb.f.mu.Unlock()
}

// settleStop reports whether the group's stop on its own (stopping), if
// any, has ended: the tree says the group is no longer Stopping, or has
// been for longer than its ShutdownTimeout (a Shutdown that overran it,
// which may never return: said Failed all the same, as a hung Shutdown
// of a restart is). The group's ChildStopped wakes the loop when it has
// stopped (subtreeMoved), and each probe tick reads the tree again
// meanwhile, so a stop whose ChildStopped never comes (its children
// stopped by a stand-down instead) or that overruns is seen all the same,
// within a ProbePeriod. A member going Offline meanwhile is said so once
// the stop has ended too.
func (mb *member) settleStop(ctx context.Context) bool {
	f := mb.f
	f.mu.Lock()
	stopping := mb.stopping
	f.mu.Unlock()
	if !stopping {
		return true
	}
	under, err := f.groupStopping(ctx, mb.path)
	if err != nil || under {
		return false
	}
	f.mu.Lock()
	mb.stopping = false
	f.mu.Unlock()
	return true
}

// stoppedItself reports why the group stopped on its own, nil if it did
// not, and counts such a group stopped. Offline, the reason is forgotten:
// the group is stopped, as an outage stops it, and the next Online starts
// it again.
func (mb *member) stoppedItself() error {
	f := mb.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if mb.stopped != nil && mb.group == groupRunning {
		mb.group = groupStopped
	}
	if !mb.online {
		mb.stopped = nil
	}
	return mb.stopped
}

// apply builds the cluster from cfg (generation gen), its group removed
// already, and probes it once: a cluster that does not answer starts
// Offline.
func (mb *member) apply(ctx context.Context, cfg *rest.Config, gen uint64) {
	mb.forget() // its group absent, or (a removal past its bound) unknown: read from the tree
	mb.applied = gen
	mb.failed, mb.cause, mb.online = nil, nil, false
	mb.failingSince, mb.answeringSince = time.Time{}, time.Time{}
	c, err := newMemberCluster(mb.f, mb.name, cfg)
	if err != nil {
		mb.failed = fmt.Errorf("cluster %q: invalid config: %w", mb.name, err)
		mb.announce(ClusterStateFailed, mb.failed)
		return
	}
	mb.cluster = c
	if !mb.probe(ctx, true) { // asked to stop before the verdict: apply again next time
		mb.applied = 0
	}
}

// reconcile moves the group towards the verdict: running while Online and
// buildable, stopped (or not added) otherwise; then announces where the
// cluster stands.
func (mb *member) reconcile(ctx context.Context) {
	if mb.cluster == nil || mb.failed != nil {
		return
	}
	mb.f.mu.Lock()
	if mb.regroup {
		mb.regroup = false
		mb.group = groupUnknown
	}
	mb.f.mu.Unlock()
	if mb.group == groupUnknown || mb.group == groupStarting {
		g, err := mb.f.groupIn(ctx, mb.path)
		if err != nil {
			return
		}
		mb.group = g
		if g != groupAbsent {
			mb.pending = nil // in the tree: what was pending was added
		}
	}
	mb.f.recheckStopped(ctx)
	if !mb.settleStop(ctx) {
		return // its group's stop on its own is under way: said once it has stopped
	}
	if err := mb.stoppedItself(); err != nil {
		// Its group failed and stopped on its own: Failed, not started
		// again while Online (that is what OnExhausted Stop asks for),
		// until a StartChild of it, an outage, or a new config.
		mb.announce(ClusterStateFailed, err)
		return
	}
	if mb.offlineCause != nil && mb.group == groupStopped && !mb.stale() {
		// Its stop on the Offline verdict has ended, its answer lost (a
		// restart of the runner) and the cluster answering again since:
		// the outage is said before the group starts again.
		mb.announce(ClusterStateOffline, mb.offlineCause)
	}
	switch {
	case mb.online && mb.group == groupAbsent:
		mb.addGroup(ctx)
	case mb.online && mb.group == groupStopped:
		mb.lifecycle(ctx, supervisor.StartChild{Name: mb.path}, groupRunning)
	case !mb.online && (mb.group == groupRunning || mb.group == groupStarting):
		mb.offlineCause = mb.cause
		mb.lifecycle(ctx, supervisor.StopChild{Name: mb.path}, groupStopped)
	}
	switch {
	case mb.failed != nil:
	case mb.stale():
		// Engaged again (or disengaged) meanwhile: not announced for a
		// config no longer wanted; the next step applies the new one.
	case mb.online && mb.group == groupRunning:
		mb.announce(ClusterStateOnline, nil)
	case !mb.online && (mb.group == groupStopped || mb.group == groupAbsent):
		mb.announce(ClusterStateOffline, mb.cause)
	}
}

// stale reports whether what the loop applied is no longer wanted: the
// cluster was engaged on another config, or disengaged, since.
func (mb *member) stale() bool {
	mb.f.mu.Lock()
	defer mb.f.mu.Unlock()
	return mb.gone || mb.gen != mb.applied
}

// addGroup builds the cluster's children and adds its group under the
// fleet.
func (mb *member) addGroup(ctx context.Context) {
	f := mb.f
	f.mu.Lock()
	parent, host := f.pathLocked(), f.host
	f.mu.Unlock()
	if host.handle.Observed.Phase() != PhaseRunning {
		return // AddChild would be refused: wait for the phase
	}
	if mb.pending == nil { // built once per config, whatever the retries
		// Nothing is built while a group is at the path: the removal of
		// the member's previous one (rotated, or disengaged and engaged
		// again), taken but held past its bound by a start whose store's
		// Recover ignores its context. Its admission refuses any start of
		// it; the loop reads the tree again (its ChildRemoved wakes it)
		// and builds once the path is free, so the member never runs
		// twice.
		f.mu.Lock()
		lingering := f.lingering[mb.path]
		f.mu.Unlock()
		if lingering {
			g, err := f.groupIn(ctx, mb.path)
			if err != nil {
				mb.group = groupUnknown
				return
			}
			if g != groupAbsent {
				mb.group = g
				return
			}
			f.mu.Lock()
			delete(f.lingering, mb.path)
			f.mu.Unlock()
		}
		children, err := buildCluster(f.build, mb.cluster)
		if err != nil {
			mb.failed = fmt.Errorf("cluster %q: %w", mb.name, err)
			mb.announce(ClusterStateFailed, mb.failed)
			return
		}
		group := NewGroup(mb.name, f.spec.Supervision, children...)
		// A webhook of the subtree at a path another webhook serves (the
		// same path in every member, or a root webhook's) would answer
		// that one's requests, for another cluster: the member fails, as
		// AddChild refuses such a child. Its own previous group's
		// webhooks are left out: this group replaces it.
		if err := host.addChildWebhookPaths(group, parent, mb.path+"/"); err != nil {
			mb.failed = fmt.Errorf("cluster %q: %w", mb.name, err)
			mb.announce(ClusterStateFailed, mb.failed)
			return
		}
		mb.pending = group
		mb.pending.kind = actors.KindCluster // its record, events and status say "cluster"
		mb.pending.hook = memberAdmission{mb: mb, gen: mb.applied}
		if n := host.shardCount(); n > 1 {
			// Sharded leadership: the subtree's controllers are pinned to
			// the cluster's shard, as in a group of AddShardedGroup.
			mb.pending.shard = ShardOf(mb.name, n) + 1
		}
	}
	if mb.stale() {
		// Engaged again (or disengaged) while build ran: the subtree is
		// of a config no longer wanted. The next step applies what is.
		return
	}
	abandoned, err := mb.awaitStart(ctx, supervisor.AddChild{Runnable: mb.pending, Parent: parent})
	if abandoned {
		return
	}
	switch {
	case err == nil:
		mb.group, mb.pending = groupRunning, nil
	case errors.Is(err, errConfigReplaced):
		// Engaged again (or disengaged) after the look above: the
		// supervisor refused the subtree as it took the add
		// (memberAdmission). The next step applies what is wanted.
		mb.pending = nil
	case isWaitForPhase(err):
	case errors.Is(err, supervisor.ErrChildRemoved):
		// Removed by hand (RemoveChild of it, or of a group above it)
		// while its add waited for its stores: its children were shut
		// down. Built and added again, as a group removed once running
		// is (subtreeMoved).
		mb.group, mb.pending = groupAbsent, nil
	case errors.Is(err, supervisor.ErrStartInterrupted) && !errors.Is(err, supervisor.ErrChildStopped):
		// Added, its start cut short by a restart that a group above
		// decided (a sibling's failure, a group restarted whole), which
		// starts it again: the tree says when it runs.
		mb.group, mb.pending = groupUnknown, nil
	case errors.Is(err, supervisor.ErrDuplicateChild):
		// In the tree already: an AddChild whose answer an earlier loop
		// lost. StartChild says whether it runs.
		mb.group, mb.pending = groupStopped, nil
	case ctx.Err() != nil:
		mb.group = groupUnknown // pending kept: not built twice if it never arrived
	default:
		// The group may be in the tree with a child whose start failed
		// (supervised from now on), or refused whole (a bad name, a child
		// that is none).
		g, xerr := f.groupIn(ctx, mb.path)
		switch {
		case xerr != nil:
			mb.group = groupUnknown
		case g != groupAbsent:
			mb.group, mb.pending = groupRunning, nil
		default:
			mb.failed = fmt.Errorf("cluster %q: %w", mb.name, err)
			mb.announce(ClusterStateFailed, mb.failed)
		}
	}
}

// awaitStart sends msg, the add of the pending group (AddChild) or a
// start of the group (StartChild), and waits for its answer, which comes
// once the group's start has returned, its stores recovered first: a store
// whose Recover waits on the member's API server (informers syncing on a
// cut) holds it as long. Meanwhile the member is probed at the loop's
// ticks and the loop looks at what is wanted at every wake: once the
// member is Offline (its probes failed for FailureThreshold), disengaged
// or engaged on another config, it gives the start up (abandonStart) and
// reports abandoned; the group's state is then what the abandonment left.
// Otherwise it returns msg's answer.
func (mb *member) awaitStart(ctx context.Context, msg any) (abandoned bool, err error) {
	f := mb.f
	f.mu.Lock()
	mb.awaiting = true
	f.mu.Unlock()
	reqCtx, cancelReq := context.WithCancel(ctx)
	defer cancelReq()
	answer := make(chan error, 1)
	go func() { answer <- f.request(reqCtx, msg) }()
	woken := false
	defer func() {
		f.mu.Lock()
		mb.awaiting = false
		f.mu.Unlock()
		if woken {
			mb.wake() // what woke it is looked at by the next step
		}
	}()
	for {
		select {
		case err = <-answer:
			return false, err
		case <-mb.kick:
			woken = true
			if mb.stale() {
				mb.abandonStart(ctx, cancelReq, answer, true)
				return true, nil
			}
		case <-mb.tick:
			if mb.probe(ctx, false) && !mb.online {
				mb.abandonStart(ctx, cancelReq, answer, false)
				return true, nil
			}
		}
	}
}

// abandonStart gives up the add or start awaitStart waits for: the
// member went Offline (stale false: its group is stopped, as an Online
// member's is) or what the loop applied is no longer wanted (stale true:
// disengaged or rotated; its Cluster fenced, then its group removed, and
// the next step applies what is wanted). An add's admission refuses it
// from here on, so the stop or removal sent after finds the group if the
// supervisor took the add before, and the add is refused if not: no
// half-started group runs on, and a store's Recover that returns late
// starts no controller (the stop cuts the start short). The answer is
// waited for (its request's context cancelled) before it returns.
func (mb *member) abandonStart(ctx context.Context, cancelReq context.CancelFunc, answer <-chan error, stale bool) {
	f := mb.f
	f.mu.Lock()
	mb.awaiting = false
	f.mu.Unlock()
	mb.group = groupUnknown // the add may have been taken: the stop or removal asks
	if stale {
		mb.fenceAndRemove(ctx)
	} else {
		mb.lifecycle(ctx, supervisor.StopChild{Name: mb.path}, groupStopped)
		if mb.group == groupStopped {
			mb.pending = nil // in the tree, stopped: StartChild runs it once Online
		}
	}
	cancelReq()
	<-answer
}

// errAddAbandoned refuses the add of a member's group its loop gave up
// (abandonStart).
var errAddAbandoned = errors.New("its loop gave the add up (the member went Offline, or was disengaged or engaged again)")

// errConfigReplaced refuses the add of a member's group built for a config
// no longer wanted (memberAdmission).
var errConfigReplaced = errors.New("its config was replaced, or it was disengaged, before its subtree was added")

// memberAdmission is the TreeHook of a member's group, built for
// generation gen of its config. As the supervisor takes the group's add,
// in its mailbox, it refuses the add once the cluster has been engaged
// again or disengaged: the look the loop took before sending the add
// (stale) may be overtaken by an engage, and the subtree of a replaced
// config would be added and its controllers started on replaced
// credentials. The engage takes f.mu, as this does: it comes before the
// add is taken (refused) or after (a rotation of an added subtree, which
// the next step makes). It refuses too once the member has dropped the
// Cluster it was built on (forget: applied is no longer gen) or is no
// longer the fleet's member of its name: the fleet removed meanwhile
// disengaged it, and added again at the same path, its group would take
// a stale add of a subtree running on an ended Cluster, which the next
// member of the name would adopt (ErrDuplicateChild). As the supervisor
// takes a StartChild or RestartChild (TreeStarting) of the group, of
// anything in it or of a group above it, it refuses while the member is
// Offline, or once the loop's verdict is that it does not answer (failing:
// the status says Offline only once the group has stopped), unless the
// start is the loop's own (awaiting): the group's stores would wait on an
// API server that does not answer. A request naming the group or something
// in it is answered ErrClusterOffline; one naming a group above leaves the
// member's group as it is. It refuses
// too, with ErrClusterDisengaged, a start by hand of a group built for a
// config replaced since or a cluster disengaged: the loop removes that
// subtree, whose Cluster refuses writes, and never starts it. It never
// blocks.
type memberAdmission struct {
	mb  *member
	gen uint64
}

func (a memberAdmission) InTree(ev supervise.TreeEvent, path string) error {
	if ev != supervise.TreeAdding && ev != supervise.TreeStarting {
		return nil
	}
	f := a.mb.f
	f.mu.Lock()
	defer f.mu.Unlock()
	mb := a.mb
	stale := mb.gone || mb.gen != a.gen || mb.applied != a.gen || f.members[mb.name] != mb
	if ev == supervise.TreeStarting {
		switch {
		case stale:
			return fmt.Errorf("cluster %q at %q: built for a config replaced since, or disengaged; its fleet removes it: %w", mb.name, path, ErrClusterDisengaged)
		case mb.awaiting:
		case mb.status.State == ClusterStateOffline:
			return fmt.Errorf("cluster %q is Offline (%v); its fleet starts it once it answers: %w", mb.name, mb.status.Err, ErrClusterOffline)
		case mb.failing != nil:
			return fmt.Errorf("cluster %q does not answer (%v): its fleet is taking it Offline, and starts it once it answers: %w", mb.name, mb.failing, ErrClusterOffline)
		}
		return nil
	}
	if stale {
		return fmt.Errorf("cluster %q at %q: %w", mb.name, path, errConfigReplaced)
	}
	if !mb.awaiting {
		return fmt.Errorf("cluster %q at %q: %w", mb.name, path, errAddAbandoned)
	}
	return nil
}

// lifecycle sends a StartChild or StopChild for the group; on success the
// group is then in state next.
func (mb *member) lifecycle(ctx context.Context, msg any, next groupState) {
	var err error
	if _, start := msg.(supervisor.StartChild); start {
		// Its stores recover first, perhaps waiting on the member's API
		// server: probed meanwhile, and given up when the member is
		// Offline, disengaged or rotated.
		var abandoned bool
		if abandoned, err = mb.awaitStart(ctx, msg); abandoned {
			return
		}
	} else {
		err = mb.f.boundedRequest(ctx, mb.path, msg)
	}
	switch {
	case errors.Is(err, errAnswerOverran):
		// Taken, perhaps, but not answered within its bound: a start of
		// the group whose store's Recover ignores its context holds the
		// stop. The tree says where the group stands (Stopping past its
		// ShutdownTimeout reads as stopped), and the loop probes on.
		mb.group = groupUnknown
	case err == nil, errors.Is(err, supervisor.ErrAlreadyRunning), errors.Is(err, supervisor.ErrChildStopped):
		// ErrChildStopped: a start cut short by a StopChild of the group
		// or of a group above it, as a start followed by that stop, which
		// lasts until the loop next moves the group (docs/fleet.md), not a
		// failed start. (A stop of the fleet stops its runner too.)
		mb.group = next
	case errors.Is(err, supervisor.ErrUnknownChild):
		mb.group = groupAbsent
	case ctx.Err() != nil, errors.Is(err, supervisor.ErrChildRemoved), errors.Is(err, supervisor.ErrStartInterrupted):
		// Lost, or cut short by a removal of the group or of a group
		// above it, or by a restart of it that a group decided (a
		// sibling's failure, a group above restarted whole), which starts
		// it again: the tree says where it stands.
		mb.group = groupUnknown
	case isWaitForPhase(err), errors.Is(err, supervisor.ErrBusy), errors.Is(err, supervisor.ErrStopped),
		errors.Is(err, ErrClusterDisengaged), errors.Is(err, ErrClusterOffline):
		// Tried again at the next phase or probe, or as soon as a child of
		// its subtree starts or stops (Fleet.subtreeMoved): a busy group.
		// A start the group's admission refused (engaged again since the
		// loop looked: the next step removes the group) left it as it was.
	default:
		if next == groupRunning { // its start failed: supervised like any failure
			mb.group = next
		}
	}
}

// removeGroup removes the cluster's group from the tree; true once it is
// not there.
// fenceAndRemove lets go of the member's subtree, disengaged or rotated:
// fenced first, as a lost lease fences before it stops. From here on the
// Cluster's Config refuses writes (ErrClusterDisengaged) and what was
// built on its Context ends, while the removal stops the controllers: a
// write one sends as it stops (a reconcile told to stop, a Shutdown that
// cleans up) never reaches a cluster let go, or the member on replaced
// credentials. The Cluster is never used again: an engage moves the
// generation, and apply builds a new one. It reports whether the group
// is out of the tree (removeGroup).
func (mb *member) fenceAndRemove(ctx context.Context) bool {
	if mb.cluster != nil {
		mb.cluster.cancel()
	}
	return mb.removeGroup(ctx)
}

func (mb *member) removeGroup(ctx context.Context) bool {
	if mb.group == groupAbsent {
		return true
	}
	f := mb.f
	err := f.boundedRequest(ctx, mb.path, supervisor.RemoveChild{Name: mb.path})
	switch {
	case err == nil, errors.Is(err, supervisor.ErrUnknownChild):
		mb.group = groupAbsent
		mb.removed()
		return true
	case errors.Is(err, errAnswerOverran):
		// Taken, but not answered within its bound: a start of the group
		// whose store's Recover ignores its context holds the removal
		// (the group Stopping until it returns). The Cluster is fenced
		// already and the group's admission refuses any start of it
		// (stale), so it never runs again: once the tree shows it
		// Stopping past its ShutdownTimeout the member lets it go, as
		// out. Its group state stays unknown, and nothing is built beside
		// it: addGroup waits until the path is free, for a rotation's new
		// config or a new member of the same name.
		mb.group = groupUnknown
		cs, ok, xerr := f.childIn(ctx, mb.path)
		switch {
		case xerr != nil:
		case !ok:
			mb.group = groupAbsent
			mb.removed()
			return true
		case cs.State == supervisor.StateStopping && !f.stoppingInBound(cs):
			f.mu.Lock()
			f.lingering[mb.path] = true // addGroup builds nothing there until it has gone
			f.mu.Unlock()
			return true
		}
	case ctx.Err() != nil:
		mb.group = groupUnknown
	}
	return false
}

// probe asks the cluster's API server for /readyz and applies the
// thresholds: the first probe of a config decides at once (a cluster that
// does not answer when engaged starts Offline); after it, an Online cluster
// goes Offline once failing for FailureThreshold, an Offline one Online once
// answering for SuccessThreshold.
// It reports whether the probe gave a verdict (not when ctx ended first).
func (mb *member) probe(ctx context.Context, first bool) bool {
	if mb.cluster == nil {
		return false
	}
	f := mb.f
	// The thresholds are judged by when each probe was sent, at the
	// period's ticks, not by when its answer came, and within half a
	// period (slack): probes a period apart span a threshold that is a
	// multiple of the period only up to the jitter of their sending and
	// answering, and a span a hair short of it would cost a whole period
	// more than the threshold plus one period.
	now := f.now()
	slack := f.spec.ProbePeriod.Duration / 2
	err := mb.cluster.probe(ctx, f.spec.ProbeTimeout.Duration)
	if ctx.Err() != nil {
		return false // asked to stop: no verdict
	}
	f.mu.Lock()
	mb.status.LastProbe, mb.status.ProbeErr = now, err
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		switch {
		case mb.online:
			mb.failing = nil
		case mb.cause != nil:
			mb.failing = mb.cause
		default:
			mb.failing = errors.New("its probes have not passed for SuccessThreshold")
		}
		f.mu.Unlock()
	}()
	switch {
	case first:
		mb.online, mb.cause = err == nil, err
	case err == nil:
		mb.failingSince = time.Time{}
		if mb.online {
			return true
		}
		if mb.answeringSince.IsZero() {
			mb.answeringSince = now
		}
		if now.Sub(mb.answeringSince)+slack >= f.spec.SuccessThreshold.Duration {
			mb.online, mb.cause, mb.answeringSince = true, nil, time.Time{}
		}
	default:
		mb.answeringSince = time.Time{}
		if !mb.online {
			mb.cause = err
			return true
		}
		if mb.failingSince.IsZero() {
			mb.failingSince = now
		}
		if d := now.Sub(mb.failingSince); d+slack >= f.spec.FailureThreshold.Duration {
			mb.online, mb.failingSince = false, time.Time{}
			mb.cause = fmt.Errorf("API server failed its probes for %s: %w", d, err)
		}
	}
	return true
}

// announce publishes where the cluster stands, once per change: its
// status, an event, its metric.
func (mb *member) announce(state ClusterState, err error) {
	mb.offlineCause = nil // said, or no longer to be said
	if mb.announced == state {
		return
	}
	mb.announced = state
	f := mb.f
	f.mu.Lock()
	mb.status.State, mb.status.Since, mb.status.Err = state, f.clockLocked().Now(), err
	f.setReadyLocked(mb.name, state == ClusterStateOnline, false)
	f.mu.Unlock()
	mb.events.Lock()
	defer mb.events.Unlock()
	switch state {
	case ClusterStateOnline:
		f.publish(ClusterOnline, mb.path, nil)
	default:
		f.publish(ClusterOffline, mb.path, err)
	}
}

// buildCluster calls build, a panic turned into an error with its stack.
func buildCluster(build func(Cluster) []Runnable, c Cluster) (children []Runnable, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("build panicked: %v\n%s", r, debug.Stack())
		}
	}()
	children = build(c)
	if len(children) == 0 {
		return nil, errors.New("build returned no children")
	}
	return children, nil
}

// memberCluster is the Cluster build gets.
type memberCluster struct {
	name string
	cfg  *rest.Config // guarded
	// http is cfg's HTTP client, made (and cfg checked) when the cluster
	// is; the clientset on it is made on the first Client call, once: made
	// eagerly it was most of a member's heap (49 KB a member at 1,000
	// members with no informers, 14 KB without it: BenchmarkFleetEngage),
	// and a builder on controller-runtime (ctrlruntime/fleet) never asks
	// for it.
	http       *http.Client
	clientOnce sync.Once
	client     kubernetes.Interface
	ctx        context.Context
	cancel     context.CancelFunc
	probes     *http.Client // unguarded, no keep-alive: a probe leaves no connection behind
	readyz     string
}

var _ Cluster = (*memberCluster)(nil)

func (c *memberCluster) Name() string         { return c.name }
func (c *memberCluster) Config() *rest.Config { return rest.CopyConfig(c.cfg) }
func (c *memberCluster) Client() kubernetes.Interface {
	c.clientOnce.Do(func() {
		cs, err := kubernetes.NewForConfigAndClient(c.cfg, c.http)
		if err != nil {
			// cfg and its HTTP client were checked when the cluster was
			// made: what is left to fail is a bug, failing the caller
			// (a build or a Run, both supervised) with the cluster's name.
			panic(fmt.Sprintf("cluster %q: clientset: %v", c.name, err))
		}
		c.client = cs
	})
	return c.client
}
func (c *memberCluster) Context() context.Context { return c.ctx }

// newMemberCluster builds name's Cluster from raw: its config's writes
// pass the lease guard of the cluster's shard (ShardOf(name, Shards); 0
// with the single lease), and fail once the cluster is disengaged.
func newMemberCluster(f *Fleet, name string, raw *rest.Config) (*memberCluster, error) {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	c := &memberCluster{name: name, ctx: ctx, cancel: cancel}
	manager := &ControllerManager{BaseManager: host}
	shard := ShardOf(name, host.shardCount()) // 0 unless sharded
	guard := func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("cluster %q (disengaged, its config replaced, or the manager stopped): %w", name, ErrClusterDisengaged)
		}
		return manager.ShardLeaseGuard(shard)
	}
	c.cfg = rest.CopyConfig(raw)
	c.cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return GuardTransport(guard, rt) })
	var err error
	if c.http, err = rest.HTTPClientFor(c.cfg); err != nil {
		cancel()
		return nil, err
	}
	u, _, err := rest.DefaultServerUrlFor(raw)
	if err != nil {
		cancel()
		return nil, err
	}
	u.Path = path.Join(u.Path, "/readyz")
	c.readyz = u.String()
	tlsConfig, err := rest.TLSConfigFor(raw)
	if err != nil {
		cancel()
		return nil, err
	}
	rt, err := rest.HTTPWrappersForConfig(raw, &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: tlsConfig, DisableKeepAlives: true,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	c.probes = &http.Client{Transport: rt}
	return c, nil
}

// probe GETs the API server's /readyz within timeout (on the real clock:
// it bounds I/O): nil when it answers 200.
func (c *memberCluster) probe(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.readyz, nil)
	if err != nil {
		return err
	}
	resp, err := c.probes.Do(req)
	if err != nil {
		return fmt.Errorf("GET /readyz: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /readyz: %s: %q", resp.Status, body)
	}
	return nil
}

// configKey tells two configs apart by what reaches the API server: an
// engage with an equal key changes nothing.
func configKey(c *rest.Config) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %q %q %+v %+v %+v %q %v %d %s|",
		c.Host, c.APIPath, c.Username, c.Password, c.BearerToken, c.BearerTokenFile,
		c.Impersonate, c.AuthProvider, c.ExecProvider, c.UserAgent, c.QPS, c.Burst, c.Timeout)
	t := c.TLSClientConfig
	fmt.Fprintf(h, "%v %q %q %q %q %q %x %x %x %q", t.Insecure, t.ServerName, t.CertFile, t.KeyFile, t.CAFile,
		t.NextProtos, t.CertData, t.KeyData, t.CAData, c.ContentType)
	return hex.EncodeToString(h.Sum(nil))
}

// clock is the manager's clock (WithClock), or the real one.
func (f *Fleet) clock() supervise.Clock {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clockLocked()
}

// clockLocked is clock; f.mu is held.
func (f *Fleet) clockLocked() supervise.Clock {
	host := f.host
	if host == nil {
		return clock.RealClock{}
	}
	return host.opts.clockOrReal()
}

// errAnswerOverran: a StopChild or RemoveChild of a member's group was not
// answered within its bound (boundedRequest).
var errAnswerOverran = errors.New("not answered within the group's ShutdownTimeout and a probe period")

// boundedRequest sends msg, a StopChild or RemoveChild of the member's
// group at path, and waits for its answer no longer than the group's
// ShutdownTimeout plus a probe period, on the manager's clock: a start of
// the group whose store's Recover ignores its context holds the answer
// for as long as the Recover runs, and the loop would neither probe nor
// follow its provider meanwhile. Past the bound it returns an error that
// wraps errAnswerOverran, and the loop reads the tree (a group Stopping
// past its ShutdownTimeout counts as stopped: stoppingInBound).
func (f *Fleet) boundedRequest(ctx context.Context, path string, msg any) error {
	// The fleet's own ShutdownTimeout, else the manager's: a group above
	// the fleet may set another, and then the loop only reads the tree
	// sooner or later (stoppingInBound reads the group's own).
	f.mu.Lock()
	bound, host := f.spec.Supervision.ShutdownTimeout.Duration, f.host
	f.mu.Unlock()
	if bound <= 0 && host != nil {
		bound = host.timing.ShutdownTimeout
	}
	if bound <= 0 {
		return f.request(ctx, msg)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var overran atomic.Bool
	t := f.clock().AfterFunc(bound+f.spec.ProbePeriod.Duration, func() {
		overran.Store(true)
		cancel()
	})
	defer t.Stop()
	err := f.request(rctx, msg)
	if err != nil && ctx.Err() == nil && overran.Load() {
		return fmt.Errorf("%w: %w", errAnswerOverran, err)
	}
	return err
}
