package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// watchDeadlines gives up, every quarter of RetryPeriod until ctx ends, any
// held shard not renewed for RenewDeadline, whatever the loop is doing. The
// loop sends no write that it waits for, but it checks deadlines only when
// a message or a tick wakes it, a retry period apart at worst: the watcher
// bounds a loss's lateness by a quarter of one, within the fence budget.
// The watcher ends the shard's term (its guards fail at once) and calls
// Lost; the loop then drops the shard (absorbEarly) without calling Lost
// again. It leaves alone a shard whose Acquired has not returned yet
// (announcing): a RecordEvent or an Acquired that blocked past the
// deadline would otherwise have its Lost delivered before its Acquired,
// and the user count the shard held after its loss. Meanwhile its guards
// still fail by their term's own clock.
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

// absorbEarly drops, on the loop, the shards the deadline watcher gave up:
// they are not held any more, and are not campaigned for until the Lost
// callback's done (unless it has been called already).
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

// loseOverdue loses, on the loop, every held shard not renewed for
// RenewDeadline: the deadline watcher's decision (checkDeadlines), taken
// now rather than at its next tick.
func (e *Elector) loseOverdue() {
	e.checkDeadlines()
	e.absorbEarly()
}
