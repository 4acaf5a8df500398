package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// fleetRunner is the child "<fleet>/provider": a controller, so that the
// provider runs supervised (a panic or an error is a failure of a named
// child, restarted with backoff) and stops with the manager. Its Run starts
// an incarnation: the provider's goroutine and one loop per member cluster;
// its Shutdown ends them and waits.
type fleetRunner struct{ f *Fleet }

// fleetIncarnation is one Run of the runner: what its Shutdown ends.
type fleetIncarnation struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the provider's goroutine and the member loops
	unsub  func()
	// live: its loops and provider run (f.mu); until then engage starts
	// no loop, so that a member never has two.
	live bool
	// done is closed once every goroutine of the incarnation has returned
	// (after its Shutdown, which may return earlier when its ctx ends).
	done chan struct{}
	// next is closed when the next incarnation's Run begins: an
	// incarnation stopped without the manager stopping (a stand-down, a
	// StopChild of the runner or of a group above it) keeps the clusters
	// for it, unless the manager stops first.
	next chan struct{}
}

// Name is FleetProviderChild.
func (r *fleetRunner) Name() string { return FleetProviderChild }

// Run starts the provider and a loop for every member cluster known from
// an earlier incarnation, and returns: no member holds up the start.
func (r *fleetRunner) Run(ctx context.Context) error {
	f := r.f
	f.mu.Lock()
	host, err := f.host, f.err
	f.mu.Unlock()
	switch {
	case err != nil:
		return err
	case host == nil:
		return fmt.Errorf("fleet %q: not added to a manager", f.name)
	}
	report, _ := FailureReporter(ctx)
	inc := &fleetIncarnation{done: make(chan struct{}), next: make(chan struct{})}
	// Run's ctx ends when Run returns; the incarnation lives until Shutdown.
	inc.ctx, inc.cancel = context.WithCancel(context.WithoutCancel(ctx))
	inc.unsub = host.Subscribe(func(e Event) {
		switch e.Type {
		case PhaseChanged:
			f.phaseChanged()
		case ChildStarted, ChildStopped, ChildRemoved:
			f.subtreeMoved(e.Child, e.Type)
		case ChildFailed:
			f.groupFailed(e.Child, e.Err)
		case EventsDropped:
			f.eventsDropped()
		}
	})
	f.mu.Lock()
	prev := f.last
	f.inc, f.last = inc, inc
	f.mu.Unlock()
	if prev != nil {
		close(prev.next)
	}
	inc.wg.Add(1)
	go func() {
		defer inc.wg.Done()
		// A previous incarnation whose Shutdown overran its context (a
		// provider that ignores ctx, a member's removal that hangs) still
		// has goroutines: wait for them, so that there is never a second
		// provider or a second loop for a member.
		if prev != nil {
			select {
			case <-prev.done:
			case <-inc.ctx.Done():
				return
			}
		}
		// Removed and added again at another path before the previous
		// incarnation returned: the members kept (their Context, their
		// caches) take the new path before any loop of theirs runs. The
		// old path hears each disengaged (its subtree went with the fleet,
		// its ready series is deleted), and the new one hears it engaged,
		// then where it stands.
		f.mu.Lock()
		moved := f.repathLocked()
		f.mu.Unlock()
		for _, mv := range moved {
			mv.mb.events.Lock()
			f.publish(ClusterDisengaged, mv.from, nil)
			f.publish(ClusterEngaged, mv.mb.path, nil)
			mv.mb.events.Unlock()
		}
		f.mu.Lock()
		if inc.ctx.Err() != nil {
			f.mu.Unlock()
			return
		}
		inc.live = true
		for _, mb := range f.members {
			f.startLoop(inc, mb)
		}
		f.mu.Unlock()
		// engage and disengage are this incarnation's: once it has ended
		// (Shutdown: the fleet removed, stopped or restarted) they refuse,
		// so that a provider's goroutine that outlives its Run (a leaked
		// watch) engages nothing into the fleet added or started again,
		// whose Run engages what it knows.
		engage := func(name string, cfg *rest.Config) error { return f.engage(inc, name, cfg) }
		disengage := func(name string) { f.disengage(inc, name) }
		err := runProvider(context.WithValue(inc.ctx, problemKey{}, f), f.provider, engage, disengage)
		if inc.ctx.Err() != nil || err == nil {
			return // asked to stop, or done engaging: the clusters stay
		}
		if report != nil {
			report(fmt.Errorf("fleet %q: cluster provider: %w", f.name, err))
		}
	}()
	return nil
}

// Shutdown ends the incarnation and waits for its goroutines or ctx. When
// the manager itself is shutting down (not a restart of the runner, not a
// stand-down), every cluster's Context ends too.
func (r *fleetRunner) Shutdown(ctx context.Context) {
	f := r.f
	f.mu.Lock()
	inc := f.inc
	f.inc = nil
	host := f.host
	if inc != nil {
		// With f.inc: the engage of a Run whose ctx is live is never
		// refused (engage reads f.inc under f.mu).
		inc.cancel()
	}
	f.mu.Unlock()
	if inc == nil {
		return
	}
	inc.unsub()
	// Only the manager's shutdown ends the clusters: a stand-down (a lease
	// or the last shard lost, re-electing) keeps them, as their groups stay
	// in the tree and the next start round starts them again on the same
	// Cluster (ended, its controllers would start on a dead Context and be
	// rebuilt once Running: two starts a member per re-election).
	p := PhaseIdle
	if host != nil {
		p = host.handle.Observed.Phase()
	}
	stopping := p == PhaseShuttingDown || p.Ended()
	go func() {
		inc.wg.Wait()
		if stopping {
			// Once the loops have returned, whenever that is: a provider
			// that ignores its context outlives ctx, and the clusters'
			// Contexts must end all the same.
			f.mu.Lock()
			for _, mb := range f.members {
				mb.forget()
			}
			f.mu.Unlock()
		}
		close(inc.done)
		if stopping || host == nil {
			return
		}
		// Kept for the next incarnation (a stand-down: the next start
		// round runs the runner again). Should the manager stop first
		// (shut down while Electing, or with the runner stopped by
		// request), no Shutdown of the runner comes to end the clusters:
		// they end with the manager, as Cluster.Context says.
		select {
		case <-inc.next:
		case <-host.Done():
			f.mu.Lock()
			if f.last == inc {
				for _, mb := range f.members {
					mb.forget()
				}
			}
			f.mu.Unlock()
		}
	}()
	select {
	case <-inc.done:
	case <-ctx.Done():
	}
}

// managerStopped: the manager has stopped (Stopped or Failed), its
// children stopped, before Done closes. A runner stopped without the
// manager stopping (a stand-down: shut down while Electing; or a StopChild
// of it or of a group above it) kept the clusters for its next Run, which
// will not come: they end now, as Cluster.Context says, unless that
// incarnation's goroutines still run (a provider that ignores its
// context), whose Shutdown ends them once they return. It never blocks.
func (f *Fleet) managerStopped() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inc != nil || f.last == nil {
		return
	}
	select {
	case <-f.last.done:
	default:
		return
	}
	for _, mb := range f.members {
		mb.forget()
	}
}

// InTree is the supervisor telling the runner what became of it, and so of
// its fleet (Fleet.inTree). It never blocks.
func (r *fleetRunner) InTree(ev supervise.TreeEvent, path string) error { return r.f.inTree(ev, path) }

// GetHealth is always healthy (a member's outage is no failure of the
// fleet, and never fails /healthz); its message counts the members by
// state and names those not Online.
func (r *fleetRunner) GetHealth() HealthStatus {
	counts := map[ClusterState][]string{}
	for _, c := range r.f.Clusters() {
		counts[c.State] = append(counts[c.State], c.Name)
	}
	var parts []string
	for _, s := range []ClusterState{ClusterStateOnline, ClusterStateEngaging, ClusterStateOffline, ClusterStateFailed} {
		names := counts[s]
		switch {
		case len(names) == 0:
		case s == ClusterStateOnline:
			parts = append(parts, fmt.Sprintf("%d %s", len(names), s))
		default:
			parts = append(parts, fmt.Sprintf("%d %s (%s)", len(names), s, strings.Join(names, ", ")))
		}
	}
	msg := "no member clusters"
	if len(parts) > 0 {
		msg = strings.Join(parts, ", ")
	}
	return HealthStatus{Name: FleetProviderChild, Healthy: true, Message: msg}
}

// engage is the provider's engage, handed to the Run of incarnation inc:
// it validates, records the desired config and wakes (or starts) the
// cluster's loop. It never blocks on the cluster. Once inc has ended
// (f.inc is no longer inc: read under f.mu, as Shutdown clears it) it
// refuses, and changes nothing.
func (f *Fleet) engage(inc *fleetIncarnation, name string, cfg *rest.Config) error {
	if err := validClusterName(name); err != nil {
		return fmt.Errorf("fleet %q: engage: %w", f.name, err)
	}
	if cfg == nil {
		return fmt.Errorf("fleet %q: engage %q: nil config", f.name, name)
	}
	key := configKey(cfg)
	mb, known := f.lockMember(name)
	if f.inc != inc {
		f.mu.Unlock()
		mb.events.Unlock()
		return fmt.Errorf("fleet %q: engage %q: %w", f.name, name, errRunEnded)
	}
	if known != nil && !mb.gone && mb.key == key {
		// Already this config (checked under both locks: equal engages
		// that race change the cluster once). A problem reported since
		// (a Secret broken, then put back) is over: it is engaged.
		mb.status.Problem = nil
		f.mu.Unlock()
		mb.events.Unlock()
		return nil
	}
	if known == nil {
		f.members[name] = mb
	}
	mb.gone = false
	mb.status.Problem = nil
	mb.want, mb.key = rest.CopyConfig(cfg), key
	mb.gen++
	mb.status.State, mb.status.Since, mb.status.Err = ClusterStateEngaging, f.clockLocked().Now(), nil
	if known == nil && f.inc != nil && f.inc.live {
		f.startLoop(f.inc, mb)
	}
	path := mb.path
	f.mu.Unlock()
	f.publish(ClusterEngaged, path, nil)
	mb.events.Unlock()
	mb.wake()
	return nil
}

// errRunEnded refuses an engage by a provider whose Run has been asked to
// return (its incarnation ended).
var errRunEnded = errors.New("the cluster provider's Run was asked to return: its engage and disengage are no longer the fleet's")

// lockMember returns the member of name (known) or a new one not yet in
// members, with mb.events and f.mu held: after any member of the name that
// is leaving has published its ClusterDisengaged, and while members still
// holds what it returns. mb.events is held from a change of the member
// until the event that announces it is published: the member's loop, which
// may act on the change at once (a new member's first step, a probe tick),
// publishes what follows from it under the same lock, so a subscriber sees
// the announcement first.
func (f *Fleet) lockMember(name string) (mb *member, known *member) {
	for {
		f.mu.Lock()
		if lv := f.leaving[name]; lv != nil {
			// Wait on the channel, not on lv.events: a member removed
			// with its runner (removedFromTree) leaves for as long as
			// its group's removal takes, without holding its events.
			left := lv.left
			f.mu.Unlock()
			<-left
			continue
		}
		known = f.members[name]
		mb = known
		if mb == nil {
			mb = newMember(f, name)
		}
		f.mu.Unlock()
		mb.events.Lock()
		f.mu.Lock()
		if f.members[name] == known {
			if known == nil {
				// The fleet may have moved while f.mu was released
				// (added again elsewhere, its members repathed): a new
				// member takes the fleet's path as it joins members, or
				// its events, status and disengage would name the old one
				// while its group is added under the new.
				p := f.pathLocked() + "/" + name
				mb.path, mb.status.Path = p, p
			}
			return mb, known
		}
		// Engaged by another call meanwhile, or removed by its loop
		// (disengaged): look again.
		f.mu.Unlock()
		mb.events.Unlock()
	}
}

// disengage is the provider's disengage, handed to the Run of incarnation
// inc: the cluster's loop removes its subtree. Once inc has ended it does
// nothing.
func (f *Fleet) disengage(inc *fleetIncarnation, name string) {
	f.mu.Lock()
	mb := f.members[name]
	if f.inc != inc {
		mb = nil
	}
	if mb != nil {
		mb.gone = true
	}
	f.mu.Unlock()
	if mb != nil {
		mb.wake()
	}
}

// removedFromTree: the fleet left the manager's tree (a RemoveChild of it
// or of a group above it), told by the supervisor's mailbox as its runner
// leaves (InTree), before the removal is answered. Once its last incarnation's
// goroutines have returned (a provider that ignores its context may
// outlive the removal), every member is disengaged: its Context ends, its
// ready series goes, ClusterDisengaged is published, and Clusters no
// longer lists it. A fleet added again before that has loops running
// already: its members read the tree for their groups instead, gone with
// the fleet, and add them again.
func (f *Fleet) removedFromTree() {
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	go func() {
		if last != nil {
			<-last.done
		}
		f.mu.Lock()
		if f.inc != nil { // added again, and running
			for _, mb := range f.members {
				mb.regroup = true
				mb.wake()
			}
			f.mu.Unlock()
			return
		}
		members := slices.Collect(maps.Values(f.members))
		for _, mb := range members {
			mb.forget()
			f.leave(mb)
		}
		host, path := f.host, f.pathLocked()
		f.mu.Unlock()
		if host != nil {
			// The runner removed alone (RemoveChild("fleet/provider")):
			// its fleet's group is still in the tree, and the members'
			// groups go as a disengage takes them, not left running on
			// clusters that have ended.
			ctx := context.Background()
			if g, err := f.groupIn(ctx, path); err == nil && g != groupAbsent {
				for _, mb := range members {
					if _, err := host.Request(ctx, supervisor.RemoveChild{Name: mb.path}); err != nil && !errors.Is(err, supervisor.ErrUnknownChild) {
						f.logger().Warn("the fleet's runner was removed: cannot remove a member's group", "child", mb.path, "err", err)
					}
				}
			}
		}
		for _, mb := range members {
			mb.events.Lock()
			mb.disengaged()
			f.mu.Lock()
			f.left(mb)
			f.mu.Unlock()
			mb.events.Unlock()
		}
	}()
}

// repathLocked gives every member the path under the fleet's path, which
// changes when the fleet is removed and added again elsewhere before its
// previous incarnation has returned (its members are kept, not
// disengaged). It returns the members that moved: their groups are read
// again from the tree (under the old path they are gone with the fleet),
// their state announced again, and their ready series under the old fleet
// path deleted. No loop of theirs runs; f.mu is held.
func (f *Fleet) repathLocked() []movedMember {
	var moved []movedMember
	for _, mb := range f.members {
		p := f.pathLocked() + "/" + mb.name
		if mb.path == p {
			continue
		}
		if f.host != nil {
			f.host.metrics.ClusterReady.DeleteLabelValues(strings.TrimSuffix(mb.path, "/"+mb.name), mb.name)
		}
		moved = append(moved, movedMember{mb: mb, from: mb.path})
		mb.path, mb.status.Path = p, p
		mb.regroup = true
		mb.group = groupUnknown
		mb.announced = ""
	}
	return moved
}

// movedMember is a member that repathLocked moved, and the path it left.
type movedMember struct {
	mb   *member
	from string
}

// leave takes mb out of members, into leaving until its ClusterDisengaged
// is published (left). f.mu is held.
func (f *Fleet) leave(mb *member) {
	if f.members[mb.name] == mb {
		delete(f.members, mb.name)
	}
	if mb.left == nil || closed(mb.left) {
		mb.left = make(chan struct{})
	}
	// Another member of the name may be leaving still (one removed with
	// its runner, one disengaged by its loop): its waiters hold its own
	// channel, which its left closes, and then wait for this one.
	f.leaving[mb.name] = mb
}

// left: mb's ClusterDisengaged is published. f.mu is held.
func (f *Fleet) left(mb *member) {
	if f.leaving[mb.name] == mb {
		delete(f.leaving, mb.name)
	}
	if mb.left != nil && !closed(mb.left) {
		close(mb.left) // every close is under f.mu: checked, then closed, at once
	}
}

// closed reports whether ch is closed; it never blocks.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// startLoop starts mb's loop in inc; f.mu is held.
func (f *Fleet) startLoop(inc *fleetIncarnation, mb *member) {
	inc.wg.Add(1)
	go func() {
		defer inc.wg.Done()
		mb.run(inc.ctx)
	}()
}

// phaseChanged wakes the loops waiting for the manager to run again.
func (f *Fleet) phaseChanged() {
	f.mu.Lock()
	close(f.phase)
	f.phase = make(chan struct{})
	f.mu.Unlock()
}

// subtreeMoved wakes the loop of the member whose subtree holds path (a
// child started, stopped or removed): a loop that a request was refused
// for a reason that ends with such a move (ErrBusy: a start of the group
// in flight, from an AddChild whose answer an earlier loop did not wait
// for) looks again at once, not at its next probe.
//
// A move its loop never makes has the loop read the tree for its group
// (regroup): the group removed while the member stays engaged (by hand:
// it is added again), or a child of it started while the member is
// Offline (a restart plan of the fleet, or of a group above it, that took
// the group before the loop stopped it: it is stopped again; a start by
// hand is refused from the loop's verdict on, memberAdmission). The loop's
// own removals (a rotation) cost it one read of the tree.
func (f *Fleet) subtreeMoved(path string, typ EventType) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mb := f.memberOfLocked(path)
	if mb == nil {
		return
	}
	switch {
	case typ == ChildStarted:
		mb.stopped, mb.stopping = nil, false // started again (a StartChild of its group): it runs
		f.noted(mb)
		if mb.status.State == ClusterStateOffline {
			mb.regroup = true
		}
	case typ == ChildRemoved && path == mb.path && !mb.gone:
		mb.regroup = true
	}
	mb.wake()
}

// noted: an event has just told mb whether its group stopped on its own;
// a read of the tree begun before it (recheckStopped) is older news.
// f.mu is held.
func (f *Fleet) noted(mb *member) {
	f.events++
	mb.notedAt = f.events
}

// groupFailed: the ChildFailed of path. A member's own group that fails
// stops on its own where the fleet's OnExhausted is Stop (a spent budget,
// a contained hung Shutdown): the member is Failed until it runs again.
// Under Escalate its parent restarts it: nothing to note.
func (f *Fleet) groupFailed(path string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mb := f.memberOfLocked(path); mb != nil && mb.path == path && f.spec.Supervision.OnExhausted == ExhaustedStop {
		mb.stopped, mb.stopping = err, !hungShutdown(err)
		f.noted(mb)
		mb.wake()
	}
}

// eventsDropped: this subscription fell behind and lost events, a
// group's ChildFailed among them perhaps. The members' loops read the
// tree once to find out (recheckStopped).
func (f *Fleet) eventsDropped() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recheck = true
	for _, mb := range f.members {
		mb.wake()
	}
}

// recheckStopped reads the tree once after events were lost
// (eventsDropped) and notes each member whose group stopped on its own
// (GroupStatus.Exhausted), as groupFailed would have, or no longer has
// (started again), as subtreeMoved would have.
func (f *Fleet) recheckStopped(ctx context.Context) {
	f.mu.Lock()
	host, recheck, since := f.host, f.recheck, f.events
	f.recheck = false
	f.mu.Unlock()
	if !recheck || host == nil {
		return
	}
	st, err := host.Status(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.recheck = true // the next loop's step reads it
		return
	}
	if f.spec.Supervision.OnExhausted != ExhaustedStop {
		return
	}
	for _, mb := range f.members {
		cs, ok := st.Child(mb.path)
		switch {
		case !ok || cs.Group == nil, mb.notedAt > since: // an event since the read says more
		case cs.Group.Exhausted && mb.stopped == nil:
			mb.stopped = cs.LastError
			if mb.stopped == nil {
				mb.stopped = fmt.Errorf("group %q stopped on its own", mb.path)
			}
			mb.stopping = cs.State == supervisor.StateStopping && !hungShutdown(mb.stopped)
			mb.wake()
		case !cs.Group.Exhausted && mb.stopped != nil:
			mb.stopped, mb.stopping = nil, false
			mb.wake()
		}
	}
}

// memberOfLocked is the member whose subtree holds path, nil if none.
// f.mu is held.
func (f *Fleet) memberOfLocked(path string) *member {
	rest, ok := strings.CutPrefix(path, f.pathLocked()+"/")
	if !ok {
		return nil
	}
	name, _, _ := strings.Cut(rest, "/")
	return f.members[name]
}

// phaseSignal is closed at the next PhaseChanged.
func (f *Fleet) phaseSignal() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.phase
}

// publish sends a fleet event to the manager's subscribers.
func (f *Fleet) publish(t EventType, path string, err error) {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	if host == nil {
		return
	}
	obs := host.handle.Observed
	host.handle.Bus.Publish(Event{Type: t, Time: f.now(), Child: path, Kind: KindCluster, Phase: obs.Phase(), Err: err})
}

// setReady sets the cluster's controllermanager_cluster_ready; delete
// removes its series.
func (f *Fleet) setReady(cluster string, ready, remove bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setReadyLocked(cluster, ready, remove)
}

// setReadyLocked is setReady with f.mu held: a status and its series
// change together, so that whoever reads Online finds the series at 1.
func (f *Fleet) setReadyLocked(cluster string, ready, remove bool) {
	if f.host == nil {
		return
	}
	fleet := f.pathLocked()
	if remove {
		f.host.metrics.ClusterReady.DeleteLabelValues(fleet, cluster)
		return
	}
	v := 0.0
	if ready {
		v = 1
	}
	f.host.metrics.ClusterReady.WithLabelValues(fleet, cluster).Set(v)
}

// pathLocked is the fleet's path; f.mu is held.
func (f *Fleet) pathLocked() string {
	if f.path == "" {
		return f.name
	}
	return f.path
}

// logger is the manager's logger.
func (f *Fleet) logger() *slog.Logger {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	if host == nil {
		return slog.Default()
	}
	return host.opts.logger
}

// now is the manager's clock's now.
func (f *Fleet) now() time.Time {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	if host == nil {
		return time.Time{}
	}
	return f.clock().Now()
}

// request sends a lifecycle message to the manager; errors.Is sees the
// supervisor's sentinels.
func (f *Fleet) request(ctx context.Context, msg any) error {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	if host == nil {
		return errors.New("fleet: not added to a manager")
	}
	_, err := host.Request(ctx, msg)
	return err
}

// groupIn reads where the group at path stands in the manager's tree now:
// absent; unknown while it is Stopping, for no longer than its
// ShutdownTimeout (a stop under way: the loop's own, whose answer a
// restart of the runner lost, or one by hand; the group's ChildStopped
// wakes the loop to read it again, so that Offline is said only once the
// group has stopped); stopped (Stopped, or Stopping for longer: a
// Shutdown that overran its bound, not waited for); starting (a start
// under way, whose answer a restart of the runner lost: Online is said
// only once it runs, and its ChildStarted wakes the loop); or running
// (anything else: a group whose children this replica does not run, a
// shard of another's, counts as running, as the loop counts it once it has
// added it).
func (f *Fleet) groupIn(ctx context.Context, path string) (groupState, error) {
	cs, ok, err := f.childIn(ctx, path)
	switch {
	case err != nil:
		return groupUnknown, err
	case !ok:
		return groupAbsent, nil
	case f.stoppingInBound(cs):
		return groupUnknown, nil
	case cs.State == supervisor.StateStopped || cs.State == supervisor.StateStopping:
		return groupStopped, nil
	case cs.State == supervisor.StateStarting, cs.State == supervisor.StateBackingOff:
		// BackingOff: a restart of it (by its strategy, or by a group
		// above it) has stopped its children and starts them again one
		// after another, those not yet started waiting their turn. It
		// runs once they have started: the loop reads it again then.
		return groupStarting, nil
	}
	return groupRunning, nil
}

// groupStopping reports whether the group at path is Stopping, for no
// longer than its ShutdownTimeout (stoppingInBound).
func (f *Fleet) groupStopping(ctx context.Context, path string) (bool, error) {
	cs, ok, err := f.childIn(ctx, path)
	if err != nil || !ok {
		return false, err
	}
	return f.stoppingInBound(cs), nil
}

// stoppingInBound reports whether cs, a member's group, is Stopping for
// no longer than its ShutdownTimeout: a stop that takes longer waits for a
// Shutdown that overran its bound (it stays Stopping until that returns).
func (f *Fleet) stoppingInBound(cs supervisor.ChildStatus) bool {
	return cs.State == supervisor.StateStopping && (cs.Group == nil || f.clock().Since(cs.Since) < cs.Group.ShutdownTimeout)
}

// childIn is the status of the child at path in the manager's tree, and
// whether it is there.
func (f *Fleet) childIn(ctx context.Context, path string) (supervisor.ChildStatus, bool, error) {
	f.mu.Lock()
	host := f.host
	f.mu.Unlock()
	st, err := host.Status(ctx)
	if err != nil {
		return supervisor.ChildStatus{}, false, err
	}
	cs, ok := st.Child(path)
	return cs, ok, nil
}

// hungShutdown: err is a failure of a Shutdown that did not return in
// time, whose stop is not waited for.
func hungShutdown(err error) bool {
	var u *supervisor.UnstoppedError
	return errors.As(err, &u)
}

var _ Controller = (*fleetRunner)(nil)

// fleetStore is the runner under sharded leadership: a store rather than
// a controller, so that it runs on every replica that holds at least one
// shard (a controller would be pinned to one shard, on one replica). Each
// such replica adds every member's subtree, pinned to the cluster's shard:
// only the holder of that shard runs its controllers, and the replica that
// takes a shard over starts them with the shard.
type fleetStore struct{ r *fleetRunner }

// Name is FleetProviderChild; Recover is the runner's Run, Shutdown its
// Shutdown, GetHealth its GetHealth.
func (s fleetStore) Name() string                                     { return FleetProviderChild }
func (s fleetStore) Recover(ctx context.Context) error                { return s.r.Run(ctx) }
func (s fleetStore) Shutdown(ctx context.Context)                     { s.r.Shutdown(ctx) }
func (s fleetStore) GetHealth() HealthStatus                          { return s.r.GetHealth() }
func (s fleetStore) InTree(ev supervise.TreeEvent, path string) error { return s.r.InTree(ev, path) }

var _ Store = fleetStore{}

// isWaitForPhase reports whether err means the manager is not Running: a
// request to try again once its phase changes.
func isWaitForPhase(err error) bool {
	return errors.Is(err, supervisor.ErrNotRunning)
}

// problemKey keys the fleet in its provider's context, for
// ReportClusterProblem.
type problemKey struct{}

// ReportClusterProblem tells the fleet whose provider's Run received ctx
// that cluster could not be engaged (or engaged again) and why: a
// kubeconfig that does not parse, a second source for one cluster. The
// fleet publishes a ClusterEngaged event whose Err is err, and keeps err
// as the cluster's ClusterStatus.Problem until the cluster is engaged or
// disengaged; a cluster the fleet did not know is listed in State Failed
// (disengage removes it). Nothing else changes: an engaged cluster stays
// on its config. With a ctx that is not a provider's, it does nothing.
func ReportClusterProblem(ctx context.Context, cluster string, err error) {
	f, _ := ctx.Value(problemKey{}).(*Fleet)
	if f == nil || err == nil {
		return
	}
	if verr := validClusterName(cluster); verr != nil {
		f.logger().Warn("a cluster provider reported a problem with a cluster whose name is invalid", "fleet", f.name, "cluster", cluster, "err", err, "nameErr", verr)
		return
	}
	// As engage does: after a leaving member's ClusterDisengaged, and
	// under the member's events, so that subscribers and Clusters agree.
	mb, known := f.lockMember(cluster)
	if known == nil {
		mb.gone = false
		mb.status.State, mb.status.Since = ClusterStateFailed, f.clockLocked().Now()
		f.members[cluster] = mb
		if f.inc != nil && f.inc.live {
			f.startLoop(f.inc, mb)
		}
	}
	mb.status.Problem = err
	path := mb.path
	f.mu.Unlock()
	f.logger().Warn("a cluster provider could not engage a cluster", "fleet", f.name, "cluster", cluster, "err", err)
	f.publish(ClusterEngaged, path, err)
	mb.events.Unlock()
}
