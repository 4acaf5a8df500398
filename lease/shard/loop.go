package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The loop's messages, besides the writes' answers (written).
type (
	leaseSeen struct{ lease *coordinationv1.Lease }
	leaseGone struct{ lease *coordinationv1.Lease } // a watch's Deleted: the last version
	listed    struct {
		leases []coordinationv1.Lease
		poll   bool // listed while the watch was silent
	}
	shardDone  struct{ shard int }
	fenceDone  struct{ shard int }
	watchEnded struct{}
)

// Run campaigns until ctx ends. Then nothing is campaigned for: the member
// Lease is released at once, so that the others rebalance without waiting
// for it to expire, each held shard is handed back (Release) and its Lease
// released as soon as its done is called, and a campaign still in flight
// that wins its shard releases it again without calling Acquired. Run
// returns once every Lease is released (or a release has failed for
// RenewDeadline; the Lease then expires on its own) and every write it sent
// has been answered.
func (e *Elector) Run(ctx context.Context) {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.watch(watchCtx) })
	wg.Go(func() { e.watchDeadlines(watchCtx) })
	defer func() { stopWatch(); wg.Wait(); e.stopCampaigns() }()

	if e.cfg.SingleLease {
		// client-go's words, which operators of the previous release grep for.
		e.cfg.Logger.Info("Attempting to acquire leader lease...", "lock", e.cfg.Namespace+"/"+e.cfg.Name)
	} else {
		e.renewMember()
	}
	ticker := e.cfg.Clock.NewTicker(e.cfg.RetryPeriod)
	defer ticker.Stop()
	close(e.ticking)
	e.done = ctx.Done()
	for {
		// A stop comes before anything else ready (select picks at random)
		// and goes straight to the reconcile below: else nothing might wake
		// the loop (the single lease has no member Lease write to follow the
		// stop) and the held Lease would be handed back only at the next tick.
		if !e.stopping && e.stopRequested() {
			e.beginStop()
		} else {
			select {
			case <-e.done:
				e.beginStop()
			case <-e.abandon: // every held shard's term ends; nothing is released
				for i, h := range e.held {
					h.term.End(false)
					e.drop(i)
				}
				return
			case ev := <-e.events:
				e.handle(ev)
				// Reconcile once for all the watch has queued: S shards renewed
				// by R replicas bring S·R events every RetryPeriod.
				e.drainEvents()
			case <-e.wake:
				e.mu.Lock()
				acks := e.acks
				e.acks = nil
				e.mu.Unlock()
				for _, ack := range acks {
					e.handle(ack)
				}
			case <-ticker.C():
				e.tick.begin(&e.ticks)
				e.absorbEarly()
				clear(e.tried) // campaign again, on the same versions too: they may have expired
				e.pollIfSilent()
				if !e.stopping && !e.cfg.SingleLease {
					e.renewMember()
				}
				e.renewAll()
			}
		}
		e.absorbEarly()
		e.reconcile()
		e.tick.end(&e.ticks)
		if e.stopping && len(e.held) == 0 && len(e.campaigning) == 0 && !e.memberWriting {
			e.writes.Wait() // the answers of writes for shards lost meanwhile: each bounded by RetryPeriod
			e.releaseMemberNow()
			return
		}
	}
}

// beginStop leaves the membership first (while the member Lease is live the
// rule gives this replica's shards back to it, and the others would wait
// for the last of them to be released), then takes nothing more; the
// reconcile that follows hands every held shard back.
func (e *Elector) beginStop() {
	e.stopping, e.done = true, nil
	e.stopCampaigns()
	e.releaseMember()
}

func (e *Elector) handle(ev any) {
	switch m := ev.(type) {
	case leaseSeen: // after a list, or a lock's read: the whole truth for its one Lease
		e.heard, e.synced = true, true
		e.noteShown(m.lease)
		e.see(m.lease)
	case listed:
		e.heard = e.heard || !m.poll // a poll is no sign of a live watch
		e.synced = true
		for k := range m.leases {
			e.noteShown(&m.leases[k])
			// A poll leaves what we hold or write to the writes' answers and
			// the watch (rule 4 of "Read before write").
			if !m.poll || !e.judgedByWrites(&m.leases[k]) {
				e.see(&m.leases[k])
			}
		}
		e.missing(m.leases, m.poll)
	case leaseGone:
		e.heard = true
		e.noteShown(m.lease)
		e.gone(m.lease)
	case *written:
		e.tick.answered(m)
		if m.kind == writeRenewal || m.kind == writeRelease {
			if e.shardWrites[m.shard]--; e.shardWrites[m.shard] <= 0 {
				delete(e.shardWrites, m.shard)
			}
		}
		switch m.kind {
		case writeCampaign:
			e.campaigned(m)
		case writeRenewal:
			e.renewedShard(m)
		case writeRelease:
			e.releasedShard(m)
		case writeMember, writeMemberRelease:
			e.wroteMember(m)
		}
	case shardDone:
		if h := e.held[m.shard]; h != nil && h.releasing && !h.released {
			h.released = true
			e.mu.Lock()
			delete(e.renewed, m.shard) // nothing of it runs: no deadline to watch
			e.mu.Unlock()
			if !h.writing { // else it goes once the renewal in flight is answered
				e.release(m.shard)
			}
		}
	case fenceDone:
		delete(e.fencing, m.shard)
	case watchEnded:
	}
}

// pollIfSilent, at each tick, asks the watch goroutine for a poll when the
// watch has shown nothing (what it has queued included) for two retry
// periods (rule 4 of "Read before write" in docs/leader-election.md).
func (e *Elector) pollIfSilent() {
	e.drainEvents()
	if e.silentTicks++; e.heard {
		e.silentTicks = 0
	}
	if e.silentTicks >= 2 && e.cfg.Lock == nil {
		select {
		case e.pollNow <- struct{}{}:
		default:
		}
	}
	e.heard = false
}

// send queues a message for the loop; it never blocks, so done functions
// may be called from the callbacks themselves, and a write's goroutine
// never waits for the loop.
func (e *Elector) send(m any) {
	e.mu.Lock()
	e.acks = append(e.acks, m)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// drainEvents handles the watch events already queued, without waiting.
func (e *Elector) drainEvents() {
	for range cap(e.events) {
		select {
		case ev := <-e.events:
			e.handle(ev)
		default:
			return
		}
	}
}

// tickState tells tests when a retry period has been handled: Elector.ticks
// grows once every write it sent (renewals, and the campaigns and releases
// that followed) has been answered. Owned by the loop.
type tickState struct {
	seq     int64 // the tick whose writes are counted; 0 before the first
	pending int   // its writes not yet answered
	open    bool  // tick seq is not counted yet
}

// begin starts tick seq+1, counting an earlier one still pending as handled.
func (t *tickState) begin(ticks interface{ Add(int64) int64 }) {
	if t.open {
		ticks.Add(1)
	}
	t.seq++
	t.pending, t.open = 0, true
}

func (t *tickState) sent(w *written) {
	if t.open {
		w.tick = t.seq
		t.pending++
	}
}

func (t *tickState) answered(w *written) {
	if w.tick != 0 && w.tick == t.seq {
		t.pending--
	}
}

// end closes the loop's pass.
func (t *tickState) end(ticks interface{ Add(int64) int64 }) {
	if t.open && t.pending == 0 {
		t.open = false
		ticks.Add(1)
	}
}

func (e *Elector) noteShown(l *coordinationv1.Lease) {
	if v, err := strconv.ParseInt(l.ResourceVersion, 10, 64); err == nil && v > e.shown.Load() {
		e.shown.Store(v)
	}
}

// watchDeadlines runs checkDeadlines every quarter of RetryPeriod until ctx
// ends, whatever the loop is doing: a loss is at most a quarter of a retry
// period late (rule 2 of "The safety model" in docs/leader-election.md).
func (e *Elector) watchDeadlines(ctx context.Context) {
	t := e.cfg.Clock.NewTicker(max(e.cfg.RetryPeriod/4, time.Millisecond))
	defer t.Stop()
	e.deadlineChecks.Add(1) // the ticker exists: a step of a fake clock reaches it
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			e.checkDeadlines()
			e.deadlineChecks.Add(1)
		}
	}
}

// checkDeadlines gives up every held shard not renewed for RenewDeadline:
// it ends the shard's term and calls Lost; the loop then drops the shard
// (absorbEarly) without calling Lost again. A shard still announcing is
// left alone, so that its Lost never comes before its Acquired; its guards
// still fail by their term's clock.
func (e *Elector) checkDeadlines() {
	now := e.cfg.Clock.Now()
	var due []int
	e.mu.Lock()
	for i, at := range e.renewed {
		if _, given := e.early[i]; given || now.Sub(at) <= e.cfg.RenewDeadline || e.announcing[i] {
			continue
		}
		due = append(due, i)
		e.early[i] = false
		e.terms[i].End(true)
		delete(e.terms, i)
		delete(e.renewed, i)
	}
	if len(due) > 0 {
		e.publishTerms()
	}
	e.mu.Unlock()
	slices.Sort(due)
	for _, i := range due {
		why := fmt.Sprintf("not renewed for %s", e.cfg.RenewDeadline)
		e.cfg.Logger.Warn("shard lost", "shard", i, "why", why)
		e.tellLost(i, why, func() {
			e.mu.Lock()
			if _, given := e.early[i]; given {
				e.early[i] = true // done called: the loop need not wait for it
			}
			e.mu.Unlock()
		})
	}
}

// absorbEarly drops, on the loop, the shards the deadline watcher gave up;
// they are fenced until the Lost callback's done (if not called already).
func (e *Elector) absorbEarly() {
	e.mu.Lock()
	if len(e.early) == 0 {
		e.mu.Unlock()
		return
	}
	early := e.early
	e.early = map[int]bool{}
	e.mu.Unlock()
	for _, i := range slices.Sorted(maps.Keys(early)) {
		if e.held[i] != nil {
			e.drop(i) // as lose does: nothing of the hold is left for the guards or the watcher
		}
		if !early[i] {
			e.fencing[i] = true
		}
	}
}

// loseOverdue takes the deadline watcher's decision on the loop, now.
func (e *Elector) loseOverdue() {
	e.checkDeadlines()
	e.absorbEarly()
}
