package shard

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A shard leaves this replica in one of two ways. Handed over (Release):
// its children stop first, their done is the Lease's release, written with
// an empty holder as client-go releases. Lost (lose): the Lease was taken,
// or not renewed for RenewDeadline; the term ends at once and Lost tells the
// user to fence.

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

// released is l given up as client-go's LeaderElector gives a Lease up
// (leaderelection.go, tryRelease): no holder, a lease duration of one
// second, renewed and acquired now, the transitions kept. A replica of
// either kind takes it at once (an empty holder is free), and one of the
// previous release that has not seen the release yet judges it expired one
// second after it does.
func released(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	l = l.DeepCopy()
	at := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime, l.Spec.AcquireTime = ptr.To(""), ptr.To(int32(1)), &at, &at
	return l
}

// recordEvent passes message to Config.RecordEvent in single-lease mode.
func (e *Elector) recordEvent(message string) {
	if e.cfg.SingleLease && e.cfg.RecordEvent != nil {
		e.cfg.RecordEvent(message)
	}
}

// releasedShard takes a release's answer.
func (e *Elector) releasedShard(w *written) {
	i, h := w.shard, w.h
	delete(e.seenWhileWriting, i)
	if e.held[i] != h {
		return
	}
	h.writing = false
	switch {
	case w.err == nil:
	case apierrors.IsConflict(w.err):
		// Taken meanwhile (see will have called lose, or will): nothing to release.
	case apierrors.IsNotFound(w.err):
		// Deleted meanwhile: nothing to release either.
	default:
		if e.cfg.Clock.Since(h.renewedAt) <= e.cfg.RenewDeadline {
			e.cfg.Logger.Warn("cannot release shard; retrying", "shard", i, "err", w.err)
			return
		}
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
