package shard

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/actorkube/controllermanager/lease"
)

// drop forgets held shard i, here and in what Guard and Check read, and
// counts it as moved.
func (e *Elector) drop(i int) {
	delete(e.held, i)
	e.mu.Lock()
	delete(e.terms, i)
	delete(e.renewed, i)
	e.publishTerms()
	e.moved++
	e.mu.Unlock()
}

// Guard returns the check behind the lease guard of what runs under shard i
// now: bound to this replica's current hold of the shard's Lease, it passes
// while a renewal sent within the recorded lease duration, less the margin
// (see lease.Fence), proves the hold, and fails for ever once that hold has
// ended, even if the shard is acquired again. When the shard is not held it
// always fails. Safe to call from any goroutine.
func (e *Elector) Guard(i int) func() error {
	e.mu.Lock()
	t := e.terms[i]
	e.mu.Unlock()
	if t == nil {
		name := e.cfg.Namespace + "/" + e.leaseName(i)
		return func() error { return &lease.NotHeldError{Lease: name, Reason: "shard not held"} }
	}
	return t.Guard()
}

// Check is the lease watchdog's check over every shard this replica holds:
// an error when one has not been renewed for LeaseDuration + grace (a stuck
// elector: a live one gives the shard up as lost after RenewDeadline).
// Safe to call from any goroutine.
func (e *Elector) Check(grace time.Duration) error {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, i := range slices.Sorted(maps.Keys(e.renewed)) {
		if late := now.Sub(e.renewed[i]); late > e.cfg.LeaseDuration+grace {
			return fmt.Errorf("shard %d (Lease %s/%s) held but not renewed for %s", i, e.cfg.Namespace, e.leaseName(i), late.Round(time.Millisecond))
		}
	}
	return nil
}

// Abandon makes Run return at once without releasing anything: the held
// shards' guards fail from now on, the renewals stop and the Leases expire
// on their own. It is for a manager that cannot prove its shards' children
// have stopped (a Shutdown that never returned), which must not give their
// Leases to another replica early.
func (e *Elector) Abandon() { e.abandonOnce.Do(func() { close(e.abandon) }) }

// publishTerms republishes the held shards' terms for CheckAny; e.mu is
// held.
func (e *Elector) publishTerms() {
	terms := slices.Collect(maps.Values(e.terms))
	e.anyTerm.Store(&terms)
}

// CheckAny returns nil while this replica can prove it holds at least one
// shard, else an error wrapping lease.ErrNotHeld: the guard of what runs
// under the union of the shards (a manager's stores). No lock, and no
// allocation when it passes.
func (e *Elector) CheckAny() error {
	if p := e.anyTerm.Load(); p != nil {
		for _, t := range *p {
			if t.Check() == nil {
				return nil
			}
		}
	}
	if e.cfg.SingleLease {
		return &lease.NotHeldError{Lease: e.cfg.Namespace + "/" + e.cfg.Name, Reason: "lease not held"}
	}
	return &lease.NotHeldError{Lease: e.cfg.Namespace + "/" + e.cfg.Name + "-*", Reason: "no shard held"}
}
