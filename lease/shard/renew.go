package shard

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/actorkube/controllermanager/lease"
)

// renewAll renews, side by side, every held shard whose last write has been
// answered, once the overdue ones are lost. A shard whose write is still in
// flight (an API server slower than a retry period) is renewed at the next
// tick after its answer: it costs that shard's renewal, never another's.
func (e *Elector) renewAll() {
	e.loseOverdue()
	for _, i := range slices.Sorted(maps.Keys(e.held)) {
		h := e.held[i]
		if h.writing {
			continue
		}
		if h.released {
			e.release(i) // retry a release that failed
			continue
		}
		l := h.lease.DeepCopy()
		at := e.cfg.Clock.Now()
		l.Spec.RenewTime = ptr.To(microTime(at))
		h.writing = true
		w := &written{kind: writeRenewal, shard: i, h: h, at: at, sent: h.term.Elapsed()}
		term, decided, proven := h.term, h.lease, h.provenUntil
		e.goWrite(w, func(ctx context.Context) (*coordinationv1.Lease, error) {
			got, err := e.update(ctx, decided, l, false)
			// A Lease deleted since is NotFound on a fake, 409 on the API
			// server (its UID precondition fails): both are read back.
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				if again, at, sent, ok := e.renewAfterConflict(ctx, decided, term); ok {
					got, err, w.at, w.sent = again, nil, at, sent
				}
			}
			mayHaveLanded := err == nil || !apierrors.IsConflict(err) && !apierrors.IsNotFound(err)
			if mayHaveLanded && decided.ResourceVersion == "" && !e.cfg.Clock.Now().Before(proven) {
				// A 500 or a timeout may hide a write that landed: as late as a success.
				return got, errRenewedLate
			}
			return got, err
		})
	}
}

// renewedShard takes a renewal's answer.
func (e *Elector) renewedShard(w *written) {
	i, h := w.shard, w.h
	if w.err != nil || e.held[i] != h {
		delete(e.seenWhileWriting, i) // else replaySeen takes it
	}
	if late := errors.Is(w.err, errRenewedLate); late || e.held[i] != h {
		if e.held[i] == h {
			e.lose(i, "renewal answered after the lease could have expired, on a store without versions")
		}
		if late {
			// Our write stands, perhaps over a rival's, lost meanwhile or not.
			e.suspectWrite(i, w.got)
		}
		return // or lost meanwhile (the watch, or the deadline)
	}
	h.writing = false
	switch {
	case w.err == nil:
		h.lease, h.renewedAt, h.confirmed, h.unsure = w.got, w.at, false, false
		h.term.Renewed(w.sent)
		if p := e.cfg.provenUntil(w.at); p.After(h.provenUntil) {
			h.provenUntil = p
		}
		if !h.released {
			e.mu.Lock()
			e.renewed[i] = h.renewedAt
			e.mu.Unlock()
		}
		if e.replaySeen(i, h); e.held[i] != h {
			return // taken since our write
		}
	case apierrors.IsConflict(w.err):
		// No longer our term as read back, or created again by another.
		e.lose(i, "renewal refused: the Lease was written by another")
		return
	case apierrors.IsNotFound(w.err):
		// Deleted, and not created again: taken meanwhile, or its namespace is gone.
		e.lose(i, "the Lease was deleted and could not be created again")
		return
	default:
		h.unsure = true
	}
	if h.released {
		e.release(i) // done was called while the renewal was in flight
	}
	e.loseOverdue()
}

// errRenewedLate is a renewal, where the Lease has no versions, answered
// only once the renewal before it no longer proved the hold
// (held.provenUntil; an end of the term does not make it late): it may have
// written over a rival's takeover, so the shard is lost. See rule 5 of
// "Read before write" (no versions) in docs/leader-election.md.
var errRenewedLate = errors.New("renewal answered after the lease could have expired")

// renewAfterConflict handles a renewal refused with a conflict (or a
// NotFound), on the renewal's goroutine, as client-go's elector does at its
// next try: it reads the Lease back and renews from the version read if it
// is still this replica's term (readBack: an edit of its metadata, or our
// own write whose answer was lost), or creates it again if it is gone. ok
// reports whether it renewed; if not, the shard is lost. See
// docs/leader-election.md, "The elector and client-go's safety rules".
func (e *Elector) renewAfterConflict(ctx context.Context, decided *coordinationv1.Lease, term *lease.Term) (got *coordinationv1.Lease, at time.Time, sent time.Duration, ok bool) {
	cur, ours, err := e.readBack(ctx, decided)
	var l *coordinationv1.Lease
	write := func(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		return e.update(ctx, cur, l, false) // with no versions (a fake clientset), it checks cur again
	}
	switch {
	case apierrors.IsNotFound(err):
		// Deleted (kubectl delete lease): created again in this term, as
		// client-go does ("A deleted Lease" in docs/leader-election.md).
		d := decided.DeepCopy()
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels, Annotations: d.Annotations}, Spec: d.Spec}
		write = e.store.Create
	case !ours:
		return nil, time.Time{}, 0, false
	default:
		l = cur.DeepCopy()
		for _, k := range []string{LabelGroup, LabelRole} {
			// The labels the group's watches select by: an edit that dropped
			// one would hide the Lease from every replica's watch and list.
			if v, ok := decided.Labels[k]; ok && l.Labels[k] != v {
				if l.Labels == nil {
					l.Labels = map[string]string{}
				}
				l.Labels[k] = v
			}
		}
	}
	at = e.cfg.Clock.Now()
	l.Spec.RenewTime = ptr.To(microTime(at))
	sent = term.Elapsed()
	got, err = write(ctx, l)
	return got, at, sent, err == nil
}

// readBack reads, on a refused write's goroutine, the Lease decided was
// written from: ours reports whether cur is still this replica's term,
// named by it (only this replica writes its own identity) and decided's
// record but for a renew time that has not gone back (a renewal of ours
// whose answer was lost may have moved it forward).
func (e *Elector) readBack(ctx context.Context, decided *coordinationv1.Lease) (cur *coordinationv1.Lease, ours bool, err error) {
	if cur, err = e.store.Get(ctx, decided.Name); err != nil || holderOf(cur) != e.cfg.Identity {
		return cur, false, err
	}
	if decided.Spec.RenewTime != nil && (cur.Spec.RenewTime == nil || cur.Spec.RenewTime.Before(decided.Spec.RenewTime)) {
		return cur, false, nil
	}
	a, b := cur.Spec.DeepCopy(), decided.Spec.DeepCopy()
	a.RenewTime, b.RenewTime = nil, nil
	return cur, equality.Semantic.DeepEqual(a, b), nil
}

// renewMember creates or renews this replica's member Lease.
func (e *Elector) renewMember() {
	if e.memberWriting {
		return
	}
	now := microTime(e.cfg.Clock.Now())
	name := MemberLease(e.cfg.Name, e.cfg.Identity)
	if o := e.observed[name]; e.member == nil && o != nil && !o.gone {
		e.member = o.lease.DeepCopy()
	}
	write, l := e.store.Update, e.member.DeepCopy()
	if l == nil {
		write, l = e.store.Create, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: map[string]string{LabelGroup: e.cfg.Name, LabelRole: RoleMember}},
			Spec:       coordinationv1.LeaseSpec{AcquireTime: &now},
		}
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(e.cfg.Identity), ptr.To(int32(e.cfg.LeaseDuration/time.Second)), &now
	e.memberWriting = true
	e.goWrite(&written{kind: writeMember}, func(ctx context.Context) (*coordinationv1.Lease, error) { return write(ctx, l) })
}

// releaseMember empties the member Lease so that the others rebalance at
// once rather than after LeaseDuration (with a write in flight, its answer
// does). A deleted one (gone) has nothing to empty: adopting its last copy
// would send an update that fails NotFound, whose answer would try again,
// for as long as the loop runs.
func (e *Elector) releaseMember() {
	if o := e.observed[MemberLease(e.cfg.Name, e.cfg.Identity)]; e.member == nil && o != nil && !o.gone && holderOf(o.lease) == e.cfg.Identity {
		e.member = o.lease.DeepCopy() // after a conflict: the watch's version
	}
	if e.member == nil || e.memberWriting {
		return
	}
	l, update := vacated(e.member), e.store.Update
	e.memberWriting = true
	e.goWrite(&written{kind: writeMemberRelease}, func(ctx context.Context) (*coordinationv1.Lease, error) { return update(ctx, l) })
}

// releaseMemberNow is Run's last try at releasing the member Lease; failing
// that it expires.
func (e *Elector) releaseMemberNow() {
	if e.member == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	if _, err := e.store.Update(ctx, vacated(e.member)); err != nil {
		e.cfg.Logger.Warn("cannot release the member lease", "err", err)
	}
	e.member = nil
}

func vacated(l *coordinationv1.Lease) *coordinationv1.Lease {
	l = l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To("")
	return l
}

func (e *Elector) wroteMember(w *written) {
	e.memberWriting = false
	switch {
	case w.err == nil && w.kind == writeMemberRelease:
		e.member = nil
		return
	case w.err == nil:
		e.member = w.got
	case apierrors.IsConflict(w.err):
		e.member = nil // read it again from the watch
	case apierrors.IsNotFound(w.err):
		e.member = nil // deleted: created again at the next renewal
		if o := e.observed[MemberLease(e.cfg.Name, e.cfg.Identity)]; o != nil {
			o.gone = true
		}
	case apierrors.IsAlreadyExists(w.err):
	case w.kind == writeMemberRelease:
		e.cfg.Logger.Warn("cannot release the member lease", "err", w.err) // Run's end tries again
		return
	default:
		e.cfg.Logger.Warn("cannot write the member lease", "err", w.err)
	}
	if e.stopping {
		e.releaseMember() // a stop came while it was in flight
	}
}

// release gives shard i's Lease up, now that nothing of it runs, unless a
// write of it is in flight (its answer calls release again). On failure the
// shard stays held, and renewAll retries at the next tick.
func (e *Elector) release(i int) {
	h := e.held[i]
	if h.writing {
		return
	}
	h.term.End(false) // nothing of the shard runs any more: no write may pass its guard
	decided, now := h.lease, e.cfg.Clock.Now()
	l := released(decided, now)
	h.writing = true
	e.goWrite(&written{kind: writeRelease, shard: i, h: h}, func(ctx context.Context) (*coordinationv1.Lease, error) {
		got, err := e.update(ctx, decided, l, false)
		if apierrors.IsConflict(err) {
			// As a renewal does (readBack): a Lease whose metadata
			// someone edited is still ours to release.
			if cur, ours, _ := e.readBack(ctx, decided); ours {
				return e.update(ctx, cur, released(cur, now), false)
			}
		}
		return got, err
	})
}

// microTime is t as a Lease keeps it, in microseconds: a fake clientset
// keeps nanoseconds until a merge patch (kubectl annotate) sends the object
// through the wire form, and readBack would then see its renew time go back.
func microTime(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Truncate(time.Microsecond))
}

// released is l given up as client-go's LeaderElector's tryRelease gives a
// Lease up: no holder, a lease duration of one second, renewed and acquired
// now ("Mixed versions during a rolling upgrade", docs/leader-election.md).
func released(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l = l.DeepCopy()
	at := microTime(now)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(""), ptr.To(int32(1)), &at, &at
	return l
}

func (e *Elector) recordEvent(message string) {
	if e.cfg.SingleLease && e.cfg.RecordEvent != nil {
		e.cfg.RecordEvent(message)
	}
}

func (e *Elector) releasedShard(w *written) {
	i, h := w.shard, w.h
	delete(e.seenWhileWriting, i)
	if e.held[i] != h {
		return
	}
	h.writing = false
	// A conflict (taken meanwhile: see will have called lose, or will) or
	// a NotFound (deleted meanwhile) leaves nothing to release.
	if w.err != nil && !apierrors.IsConflict(w.err) && !apierrors.IsNotFound(w.err) && e.cfg.Clock.Since(h.renewedAt) <= e.cfg.RenewDeadline {
		e.cfg.Logger.Warn("cannot release shard; retrying", "shard", i, "err", w.err)
		return
	}
	e.dropReleased(i)
	if w.err == nil {
		e.noteHolder(i, "")
	}
}

// dropReleased drops shard i, whose Lease has been released.
func (e *Elector) dropReleased(i int) {
	e.drop(i)
	e.cfg.Logger.Info("released shard", "shard", i)
	e.recordEvent("stopped leading")
}

// lose drops shard i and tells the user to fence it.
func (e *Elector) lose(i int, why string) {
	e.absorbEarly()
	h := e.held[i]
	if h == nil {
		return
	}
	h.term.End(true)
	e.drop(i)
	e.cfg.Logger.Warn("shard lost", "shard", i, "why", why)
	if h.released {
		return // its children had stopped already
	}
	e.fencing[i] = true
	e.tellLost(i, why, func() {})
}

// tellLost calls Lost for shard i, whose done runs then (once) and lets
// the loop campaign for it again.
func (e *Elector) tellLost(i int, why string, then func()) {
	e.recordEvent("stopped leading")
	done := sync.OnceFunc(func() { then(); e.send(fenceDone{shard: i}) })
	if f := e.cfg.Callbacks.Lost; f != nil {
		f(i, why, done)
	} else {
		done()
	}
}
