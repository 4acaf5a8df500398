package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
)

// see records l, with the local time when its record changed: an edit of
// its metadata alone is a new version to write from, but no renewal (the
// local-observation clock, docs/leader-election.md).
func (e *Elector) see(l *coordinationv1.Lease) {
	switch o := e.observed[l.Name]; {
	case o == nil || o.gone || !equality.Semantic.DeepEqual(o.lease.Spec, l.Spec):
		n := &observed{lease: l.DeepCopy(), seenAt: e.cfg.Clock.Now()}
		if o != nil && !o.gone && l.ResourceVersion == "" && ptr.Deref(l.Spec.LeaseTransitions, 0) < ptr.Deref(o.lease.Spec.LeaseTransitions, 0) {
			if prev := holderOf(o.lease); prev != "" {
				n.staleOver, n.staleFor = prev, durationOf(o.lease, e.cfg.LeaseDuration)
			} else if o.staleOver != "" {
				n.staleOver, n.staleFor = o.staleOver, o.staleFor
			}
		}
		e.observed[l.Name] = n
	case o.lease.ResourceVersion != l.ResourceVersion:
		o.lease = l.DeepCopy()
	}
	i, ok := e.shardIndex(l)
	if !ok {
		return
	}
	e.noteHolder(i, holderOf(l))
	h := e.held[i]
	if e.campaigning[i] || h != nil && h.writing {
		// The write's answer and the watch race: keep what the watch shows
		// meanwhile for the answer to replay (replaySeen).
		e.seenWhileWriting[i] = append(e.seenWhileWriting[i], l.DeepCopy())
	}
	switch {
	case h == nil:
	case sameVersion(l, h.lease):
		h.confirmed = true
	case h.released:
		// Released (our write, its answer still to come) or taken after the
		// release: either way nothing of it runs here, and it is gone.
		if holderOf(l) != e.cfg.Identity {
			e.dropReleased(i)
		}
	case h.unsure && !h.writing && holderOf(l) == e.cfg.Identity && l.Spec.RenewTime != nil &&
		(h.lease.Spec.RenewTime == nil || l.Spec.RenewTime.After(h.lease.Spec.RenewTime.Time)):
		// A renewal whose answer we missed (it timed out here, and was
		// written there): only this replica writes its own identity, and
		// its renew times only grow, so this is our write, newer than the
		// last one answered. Renew from it, or the next renewal would be
		// refused and the shard lost for nothing (an older version, from a
		// lagging watch, would be refused too). Its send time is not known:
		// the guard and the deadline still count from the last answer.
		h.lease, h.unsure, h.confirmed = l.DeepCopy(), false, true
	case h.confirmed && holderOf(l) != e.cfg.Identity:
		// Written by another after our write (Steal, or it took the Lease
		// over while we could not renew). Before confirmation, the watch
		// may still be showing versions older than our write.
		e.lose(i, fmt.Sprintf("taken by %q", holderOf(l)))
	}
}

// gone records that l, its last version, has been deleted: a tombstone
// (observed.gone). A held shard's Lease is created again by its next
// renewal (renewAfterConflict), and so is this replica's member Lease.
func (e *Elector) gone(l *coordinationv1.Lease) {
	if o := e.observed[l.Name]; o != nil && o.gone {
		return // seen gone already: expiry counts from then
	}
	e.observed[l.Name] = &observed{lease: l.DeepCopy(), seenAt: e.cfg.Clock.Now(), gone: true}
	if l.Name == MemberLease(e.cfg.Name, e.cfg.Identity) && !e.memberWriting {
		e.member = nil
	}
	if i, ok := e.shardIndex(l); ok && e.held[i] == nil {
		e.noteHolder(i, "")
	}
}

// missing takes a list's verdict on the Leases it does not hold: each one
// observed is gone, and an expired tombstone is forgotten. A poll leaves
// out the Leases judgedByWrites, as it does for those it lists.
func (e *Elector) missing(listed []coordinationv1.Lease, poll bool) {
	names := make(map[string]bool, len(listed))
	for k := range listed {
		names[listed[k].Name] = true
	}
	for name, o := range e.observed {
		switch {
		case names[name]:
		case o.gone && e.expired(o):
			delete(e.observed, name)
		case poll && e.judgedByWrites(o.lease):
		default:
			e.gone(o.lease)
		}
	}
}

// judgedByWrites reports whether l is a shard Lease this replica holds or
// is campaigning for: its writes' answers and the watch judge it.
func (e *Elector) judgedByWrites(l *coordinationv1.Lease) bool {
	i, ok := e.shardIndex(l)
	return ok && (e.held[i] != nil || e.campaigning[i])
}

// replaySeen takes, once a write of shard i has been answered with h's
// version, what the watch showed while it was in flight: our version among
// them confirms it, and a later one naming another holder means the shard
// has been taken since.
func (e *Elector) replaySeen(i int, h *held) {
	seen := e.seenWhileWriting[i]
	delete(e.seenWhileWriting, i)
	for k, l := range seen {
		if !sameVersion(l, h.lease) {
			continue
		}
		h.confirmed = true
		for _, later := range seen[k+1:] {
			if holderOf(later) != e.cfg.Identity {
				e.lose(i, fmt.Sprintf("taken by %q", holderOf(later)))
				return
			}
		}
		return
	}
}

// sameVersion reports whether a and b are one version of a Lease (or both
// none): the same resourceVersion and the same record (rule 3 of "Read
// before write" in docs/leader-election.md).
func sameVersion(a, b *coordinationv1.Lease) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ResourceVersion == b.ResourceVersion && equality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// noteHolder tells the user (HolderChanged) when shard i's holder, as
// observed, is not the one last told.
func (e *Elector) noteHolder(i int, identity string) {
	if last, told := e.holders[i]; told && last == identity {
		return
	}
	e.holders[i] = identity
	if e.cfg.SingleLease && identity != "" && identity != e.cfg.Identity && e.held[i] == nil {
		// A standby says whom it waits for, once per holder.
		e.cfg.Logger.Info("waiting for the lease held by "+identity, "lock", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity, "holder", identity)
	}
	if f := e.cfg.Callbacks.HolderChanged; f != nil {
		f(i, identity)
	}
}

func (e *Elector) shardIndex(l *coordinationv1.Lease) (int, bool) {
	if e.cfg.SingleLease {
		return 0, l.Name == e.cfg.Name
	}
	i, err := strconv.Atoi(strings.TrimPrefix(l.Name, e.cfg.Name+"-"))
	return i, err == nil && i >= 0 && i < e.cfg.Shards && ShardLease(e.cfg.Name, i) == l.Name && l.Labels[LabelRole] == RoleShard
}

func acquiredAt(l *coordinationv1.Lease) time.Time {
	if l == nil || l.Spec.AcquireTime == nil {
		return time.Time{}
	}
	return l.Spec.AcquireTime.Time
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// expired reports whether o's holder has had LeaseDuration, on our clock
// since we saw the Lease change, to renew it, and has not.
func (e *Elector) expired(o *observed) bool {
	return !e.cfg.Clock.Now().Before(o.seenAt.Add(durationOf(o.lease, e.cfg.LeaseDuration)))
}

// heldElsewhere reports whether o names a holder other than this replica
// that counts: it has not expired.
func (e *Elector) heldElsewhere(o *observed) bool {
	if o != nil && o.staleOver != "" && o.staleOver != e.cfg.Identity && e.cfg.Clock.Now().Before(o.seenAt.Add(o.staleFor)) {
		return true // a late write over another's term: that holder counts
	}
	return o != nil && holderOf(o.lease) != "" && holderOf(o.lease) != e.cfg.Identity && !e.expired(o)
}

// durationOf is l's recorded lease duration, d when it records none.
func durationOf(l *coordinationv1.Lease, d time.Duration) time.Duration {
	if s := l.Spec.LeaseDurationSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return d
}

// assignment computes the rule over what this replica sees. A stopping
// replica is no member: every shard goes to the others. The single lease
// has no member but this replica, so that it campaigns whenever the Lease
// is free or expired.
func (e *Elector) assignment() []string {
	members := []string{}
	if !e.stopping {
		members = append(members, e.cfg.Identity)
	}
	if e.cfg.SingleLease {
		return Assign(e.cfg.Shards, members, nil)
	}
	for _, o := range e.observed {
		if o.lease.Labels[LabelRole] == RoleMember && e.heldElsewhere(o) {
			members = append(members, holderOf(o.lease))
		}
	}
	holders := make([]string, e.cfg.Shards)
	acquired := make([]time.Time, e.cfg.Shards)
	for i := range holders {
		if h := e.held[i]; h != nil {
			holders[i], acquired[i] = e.cfg.Identity, acquiredAt(h.lease)
		} else if o := e.observed[e.leaseName(i)]; e.heldElsewhere(o) {
			holders[i], acquired[i] = holderOf(o.lease), acquiredAt(o.lease)
		}
	}
	return assign(e.cfg.Shards, members, holders, acquired)
}

// stopRequested reports whether Run's context has ended, whether or not
// the loop has taken the stop yet.
func (e *Elector) stopRequested() bool {
	select {
	case <-e.done:
		return true
	default:
		return e.stopping
	}
}

// publish updates what Status returns.
func (e *Elector) publish() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.status {
		s := &e.status[i]
		s.Held = e.held[i] != nil
		s.Holder = ""
		if o := e.observed[s.Lease]; o != nil && !o.gone {
			s.Holder = holderOf(o.lease)
		}
	}
}

// watch lists and watches the group's Leases (the single lease: by name)
// for the loop until ctx ends, listing again RetryPeriod after an error or
// a closed watch, and polling when the loop asks (pollNow; rule 4 of "Read
// before write" in docs/leader-election.md). A lock is polled always.
func (e *Elector) watch(ctx context.Context) {
	if e.cfg.Lock != nil {
		e.poll(ctx)
		return
	}
	leases := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace)
	opts := metav1.ListOptions{LabelSelector: LabelGroup + "=" + e.cfg.Name}
	if e.cfg.SingleLease {
		opts = metav1.ListOptions{FieldSelector: "metadata.name=" + e.cfg.Name}
	}
	list := func() (*coordinationv1.LeaseList, error) {
		l, err := readWithin(ctx, e.cfg.RenewDeadline, func(ctx context.Context) (*coordinationv1.LeaseList, error) { return leases.List(ctx, opts) })
		if err != nil {
			e.cfg.Logger.Warn("cannot list leases", "err", err)
		}
		return l, err
	}
	poll := func() bool {
		l, err := list()
		return err != nil || e.forward(ctx, listed{leases: l.Items, poll: true})
	}
	for ctx.Err() == nil {
		select {
		case <-e.pollNow: // the list below is fresher
		default:
		}
		if got, err := list(); err == nil && e.forward(ctx, listed{leases: got.Items}) {
			wopts := opts
			wopts.ResourceVersion = got.ResourceVersion
			if w, stop, err := e.openWatch(ctx, leases, wopts); err != nil {
				e.cfg.Logger.Warn("cannot watch leases", "err", err)
			} else {
				e.forwardWatch(ctx, w, poll)
				stop()
			}
		}
		retry := e.cfg.Clock.After(e.cfg.RetryPeriod)
		e.watchWaits.Add(1) // once the timer exists: a step of a fake clock now reaches it
		select {
		case <-retry:
		case <-ctx.Done():
		}
	}
}

// readWithin makes one of the watch goroutine's reads (a list, a poll, a
// lock's read) within d ("Read before write": no read waits for ever).
func readWithin[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return call(ctx)
}

// openWatch opens a watch of leases within RenewDeadline, as readWithin
// reads; once open, it lasts until ctx ends or stop is called.
func (e *Elector) openWatch(ctx context.Context, leases coordinationv1client.LeaseInterface, opts metav1.ListOptions) (watch.Interface, context.CancelFunc, error) {
	wctx, stop := context.WithCancel(ctx)
	late := time.AfterFunc(e.cfg.RenewDeadline, stop)
	w, err := leases.Watch(wctx, opts)
	if !late.Stop() && err == nil {
		w.Stop()
		err = fmt.Errorf("not opened within %s", e.cfg.RenewDeadline)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return w, stop, nil
}

// forwardWatch forwards w's events until it ends or ctx does, reading w
// whenever an event is ready and queueing, in order, those the loop has not
// taken; past e.backlog it drops the watch (rule 6 of "Read before write"
// in docs/leader-election.md). It polls when the loop asks, unless an event
// is ready or queued: the watch is then behind, not silent.
func (e *Elector) forwardWatch(ctx context.Context, w watch.Interface, poll func() bool) {
	defer w.Stop()
	var queue []any // read, not yet taken by the loop, oldest first
	ended := false  // w has ended: watchEnded is the queue's last
	read := func(ev watch.Event, ok bool) {
		if !ok {
			queue, ended = append(queue, watchEnded{}), true
			return
		}
		if l, isLease := ev.Object.(*coordinationv1.Lease); isLease {
			switch ev.Type {
			case watch.Added, watch.Modified:
				queue = append(queue, leaseSeen{lease: l})
			case watch.Deleted:
				queue = append(queue, leaseGone{lease: l})
			}
		}
	}
	for {
		var out chan<- any // nil, and never ready, while nothing waits
		var next any
		if len(queue) > 0 {
			out, next = e.events, queue[0]
		}
		results := w.ResultChan()
		if ended {
			results = nil
		}
		select {
		case out <- next:
			queue[0] = nil
			if queue = queue[1:]; len(queue) == 0 && ended {
				return
			}
		case ev, ok := <-results:
			if read(ev, ok); len(queue) > e.backlog {
				e.cfg.Logger.Warn("dropping the Lease watch: the elector's loop has not taken its last events", "events", len(queue))
				return
			}
		case <-e.pollNow:
			if len(queue) > 0 {
				break // behind: the loop has not taken what waits
			}
			select {
			case ev, ok := <-results:
				read(ev, ok)
			default:
				if !poll() {
					return
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// forward hands m to the loop; false once ctx has ended.
func (e *Elector) forward(ctx context.Context, m any) bool {
	select {
	case e.events <- m:
		return true
	case <-ctx.Done():
		return false
	}
}
