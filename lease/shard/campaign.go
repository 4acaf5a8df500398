package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/actorkube/controllermanager/lease"
)

// writeKind is what a write sent off by the loop was for.
type writeKind int

const (
	writeCampaign writeKind = iota
	writeRenewal
	writeRelease
	writeMember
	writeMemberRelease
)

// written is a Lease write the loop sent off on a goroutine of its own
// (goWrite) and, with its answer, the message that brings it back.
type written struct {
	kind  writeKind
	shard int
	h     *held // a renewal's or a release's: the hold it was for
	got   *coordinationv1.Lease
	err   error
	// A campaign's: the term it starts, the term's reading when it was
	// sent (a renewal's too: its term's), and the holder it takes the
	// shard over from.
	term     *lease.Term
	sent     time.Duration
	at       time.Time // a campaign's or a renewal's send time on Config.Clock (held.renewedAt, held.provenUntil)
	previous string
	tick     int64 // the retry period that sent it, for tests; 0 if none
}

// goWrite runs call on a goroutine of its own and hands w, with call's
// answer, back to the loop. A write is bounded by RenewDeadline, a renewal
// by its shard's renew deadline (a retry period at least): an answer that
// comes later is of no use, and one that comes sooner, however slow, costs
// nothing. Campaigns are cancelled when a stop begins.
func (e *Elector) goWrite(w *written, call func(ctx context.Context) (*coordinationv1.Lease, error)) {
	e.tick.sent(w)
	if w.kind == writeRenewal || w.kind == writeRelease {
		e.shardWrites[w.shard]++
	}
	parent, timeout := context.Background(), e.cfg.RenewDeadline
	switch w.kind {
	case writeCampaign:
		parent = e.campaigns
	case writeRenewal:
		timeout = max(e.cfg.RenewDeadline-e.cfg.Clock.Since(w.h.renewedAt), e.cfg.RetryPeriod)
	}
	e.writes.Go(func() {
		ctx, cancel := context.WithTimeout(parent, timeout)
		defer cancel()
		w.got, w.err = call(ctx)
		e.send(w)
	})
}

// reconcile hands back and campaigns for shards as decide says.
func (e *Elector) reconcile() {
	a := e.assignment()
	views := make([]shardView, len(a))
	for i := range views {
		h := e.held[i]
		o := e.observed[e.leaseName(i)]
		views[i] = shardView{assigned: a[i], held: h != nil, releasing: h != nil && h.releasing, fencing: e.fencing[i], campaigning: e.campaigning[i],
			heldElsewhere: e.heldElsewhere(o)}
	}
	for i, d := range decide(e.cfg.Identity, e.stopRequested(), e.campaignLimit(), views) {
		switch d {
		case handBack:
			e.held[i].releasing = true
			e.cfg.Logger.Info("releasing shard", "shard", i, "to", a[i])
			done := sync.OnceFunc(func() { e.send(shardDone{shard: i}) })
			if f := e.cfg.Callbacks.Release; f != nil {
				f(i, done)
			} else {
				done()
			}
		case campaignFor:
			e.campaign(i)
		}
	}
	e.publish()
}

// campaignLimit is Config.MaxCampaigns within the Lease client's rate limit,
// where it has one (a clientset made from a rest.Config; fakes have none,
// and a lock's, Config.Lock, is not known).
func (e *Elector) campaignLimit() int {
	limit := e.cfg.MaxCampaigns
	if e.cfg.Client == nil {
		return limit
	}
	if rc := e.cfg.Client.CoordinationV1().RESTClient(); rc != nil {
		if rl := rc.GetRateLimiter(); rl != nil && rl.QPS() > 0 {
			limit = min(limit, campaignsWithin(float64(rl.QPS()), e.cfg.RetryPeriod, len(e.held)))
		}
	}
	return limit
}

// campaignRequests is what one campaign costs the client's rate limiter: a
// campaign for an existing Lease reads it before it writes (update), and
// one whose create is refused reads it too.
const campaignRequests = 2

// campaignsWithin is how many campaigns fit in what a rate limiter of qps
// lets through in one retry period besides a renewal per held shard and
// the member Lease's, so that campaigns never queue the renewals up behind
// them in the client; one at least.
func campaignsWithin(qps float64, period time.Duration, held int) int {
	budget := int(qps*period.Seconds()) - held - 1
	return max(budget/campaignRequests, 1)
}

// campaign tries to acquire shard i, once per version of its Lease seen:
// created if it does not exist, else updated from the version we saw once
// a fresh read shows it still stored (rule 1 of "Read before write",
// docs/leader-election.md).
func (e *Elector) campaign(i int) {
	if !e.synced {
		return // nothing listed yet: a Lease not seen is not a Lease that does not exist
	}
	name := e.leaseName(i)
	o := e.observed[name]
	if e.heldElsewhere(o) {
		return // held elsewhere, or deleted while held and not expired yet (observed.gone)
	}
	if until, ok := e.suspect[i]; ok {
		if e.cfg.Clock.Now().Before(until) && o != nil && holderOf(o.lease) == e.cfg.Identity {
			return // our unconfirmed write: it may stand over a holder that still runs (confirm)
		}
		delete(e.suspect, i)
	}
	var decided *coordinationv1.Lease // nil: there is no Lease to update, it is created
	if o != nil && !o.gone {
		decided = o.lease
	}
	if decided != nil && decided.ResourceVersion == "" && e.shardWrites[i] > 0 {
		// No versions, and a write of an earlier hold not answered yet (rule 5
		// of "Read before write", no versions, in docs/leader-election.md). Its answer wakes the loop.
		return
	}
	if v, ok := e.tried[i]; ok && sameVersion(v, decided) {
		return
	}
	e.tried[i] = decided
	at := e.cfg.Clock.Now()
	now := microTime(at)
	seconds := int32(e.cfg.LeaseDuration / time.Second) // whole seconds (validate)
	w := &written{kind: writeCampaign, shard: i, term: lease.NewTerm(e.cfg.Clock, e.cfg.Namespace+"/"+name, e.cfg.LeaseDuration, e.cfg.clockSkewMargin())}
	e.campaigning[i] = true
	l := decided.DeepCopy()
	if l == nil {
		labels := map[string]string{LabelGroup: e.cfg.Name, LabelRole: RoleShard}
		if e.cfg.SingleLease {
			labels = nil // as client-go's LeaseLock creates it
		}
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: labels}}
	}
	if w.previous = holderOf(l); w.previous != e.cfg.Identity {
		transitions := int32(0) // a new Lease's first term
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions + 1
		}
		l.Spec.LeaseTransitions, l.Spec.AcquireTime = &transitions, &now
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(e.cfg.Identity), &seconds, &now
	w.at, w.sent = at, w.term.Elapsed()
	e.goWrite(w, func(ctx context.Context) (*coordinationv1.Lease, error) {
		if decided == nil {
			got, err := e.store.Create(ctx, l)
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile, or out of our watch's sight: read it
				// (rule 1 of "Read before write").
				if cur, gerr := e.store.Get(ctx, l.Name); gerr == nil {
					return cur, err
				}
			}
			return got, err
		}
		read := e.cfg.Clock.Now()
		w.at = read // the Update may land from here on: its deadline and proof count from it
		got, err := e.update(ctx, decided, l, true)
		if err != nil && decided.ResourceVersion == "" && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			// No versions, and an answer that is no refusal (a 500, a timeout):
			// it may have landed, perhaps over a rival's confirmed takeover.
			return got, fmt.Errorf("%w: its write was answered %w, and may have landed", errUnconfirmed, err)
		}
		if err != nil || decided.ResourceVersion != "" {
			return got, err
		}
		return e.confirm(ctx, got, e.cfg.Clock.Since(read))
	})
}

// errUnconfirmed is a campaign's write, where the Lease has no versions,
// that confirm could not prove was the last: not held (suspectWrite).
var errUnconfirmed = errors.New("the write could not be confirmed as the last")

// confirm counts a takeover of a Lease without versions (a fake clientset)
// only if its read and write took less than confirmAfter and a read-back
// that long after its answer still shows it; else errUnconfirmed. Rule 5 of
// "Read before write" (no versions) in docs/leader-election.md argues why.
func (e *Elector) confirm(ctx context.Context, got *coordinationv1.Lease, took time.Duration) (*coordinationv1.Lease, error) {
	after := e.cfg.confirmAfter()
	if took >= after {
		hint := "no RenewDeadline lets calls this slow confirm a takeover (the window is at most 1s): use a store that keeps versions"
		if need := 3 * took; need < 3*time.Second {
			hint = fmt.Sprintf("a RenewDeadline above %s (on every replica) would let calls this slow confirm one", need.Round(time.Millisecond))
		}
		return got, fmt.Errorf("%w: its read and write took %s, not less than %s, a third of RenewDeadline; %s",
			errUnconfirmed, took, after, hint)
	}
	select {
	case <-e.cfg.Clock.After(after):
	case <-ctx.Done():
		return got, fmt.Errorf("%w: %w before its read-back", errUnconfirmed, context.Cause(ctx))
	}
	cur, err := e.store.Get(ctx, got.Name)
	switch {
	case err != nil:
		return got, fmt.Errorf("%w: its read-back failed: %w", errUnconfirmed, err)
	case !sameVersion(cur, got):
		return cur, apierrors.NewConflict(leasesResource, got.Name, errors.New("written over since our write"))
	}
	return got, nil
}

// suspectWrite notes got, our write of shard i's Lease that does not count
// (confirm, errRenewedLate): a Lease naming us is not campaigned for until
// LeaseDuration from now (rule 5 of "Read before write", no versions).
func (e *Elector) suspectWrite(i int, got *coordinationv1.Lease) {
	e.suspect[i] = e.cfg.Clock.Now().Add(e.cfg.LeaseDuration)
	if got != nil {
		e.see(got)
	}
}

// confirmAfter is how long confirm lets a takeover's read and write take,
// and waits to read it back: a third of RenewDeadline, at most a second, the
// same on every replica (rule 5 of "Read before write", no versions).
func (c Config) confirmAfter() time.Duration { return min(c.RenewDeadline/3, time.Second) }

// campaigned takes a campaign's answer. A shard won by a replica that has
// begun to stop meanwhile is released again at once: nothing ran under it,
// so Acquired is not called.
func (e *Elector) campaigned(w *written) {
	i := w.shard
	delete(e.campaigning, i)
	if w.err != nil {
		seen := len(e.seenWhileWriting[i]) > 0
		delete(e.seenWhileWriting, i)
		if errors.Is(w.err, errUnconfirmed) {
			// Warn: on a store without versions (a fake clientset) that
			// answers each call in half the confirm window or more, no
			// takeover is ever confirmed, and nobody leads (rule 5).
			e.cfg.Logger.Warn("shard written but not confirmed: waiting for it to expire", "shard", i, "err", w.err,
				"confirmWindow", e.cfg.confirmAfter())
			e.suspectWrite(i, w.got)
			return
		}
		if apierrors.IsNotFound(w.err) {
			// Deleted since; it had expired by our clock (its holder gave
			// it up): it is created at the next reconcile.
			delete(e.observed, e.leaseName(i))
			delete(e.tried, i)
			return
		}
		if !apierrors.IsConflict(w.err) && !apierrors.IsAlreadyExists(w.err) {
			e.cfg.Logger.Warn("cannot acquire shard", "shard", i, "err", w.err)
		}
		if w.got != nil && !seen {
			// The read that refused the write, unless the watch has shown
			// newer since (rule 1 of "Read before write").
			e.see(w.got)
		}
		return
	}
	w.term.Renewed(w.sent)
	h := &held{lease: w.got, renewedAt: w.at, term: w.term, provenUntil: e.cfg.provenUntil(w.at)}
	e.held[i] = h
	e.replaySeen(i, h)
	if e.held[i] != h {
		return // taken already: nothing ran under it
	}
	if e.stopRequested() {
		h.releasing, h.released = true, true
		e.cfg.Logger.Info("acquired shard while stopping: releasing it", "shard", i)
		e.release(i)
		return
	}
	e.mu.Lock()
	e.terms[i], e.renewed[i] = w.term, h.renewedAt
	e.announcing[i] = true // until Acquired has returned (below)
	e.publishTerms()
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.announcing, i)
		e.mu.Unlock()
	}()
	e.cfg.Logger.Info("acquired shard", "shard", i, "from", w.previous)
	if e.cfg.SingleLease {
		e.cfg.Logger.Info("Successfully acquired lease", "lock", e.cfg.Namespace+"/"+e.cfg.Name)
	}
	e.noteHolder(i, e.cfg.Identity)
	e.recordEvent("became leader")
	if f := e.cfg.Callbacks.Acquired; f != nil {
		f(i)
	}
}
