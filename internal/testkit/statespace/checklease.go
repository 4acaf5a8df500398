package statespace

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

// checkLease checks, from the fake API server's history, that no
// controller or store has been active while this replica did not hold the
// lease, and that the lease was not released while any child was active.
func (r *runner) checkLease(now time.Time) {
	if r.srv == nil {
		return
	}
	history := r.srv.History()
	held := validity(history, r.leases(""))
	heldAny := validity(history, r.leases("store"))
	r.mu.Lock()
	exitAt := r.exitAt
	r.mu.Unlock()
	incs := r.journal.Incarnations()
	for _, in := range incs {
		if in.Kind != "controller" && in.Kind != "store" {
			continue
		}
		to := in.End()
		if to.IsZero() {
			to = now
		}
		if !exitAt.IsZero() && to.After(exitAt) {
			to = exitAt // the host has exited by then
		}
		if to.Before(in.From) {
			continue
		}
		segs := held
		if r.sc.Shards > 1 {
			segs = validity(history, r.leases(in.Child))
			if in.Kind == "store" {
				segs = heldAny // a store runs while some shard is held
			}
		}
		if gap, ok := uncovered(segs, in.From, to); ok {
			r.violateOnce(fmt.Sprintf("unfenced/%s/%d", in.Child, in.Inc), Violation{
				Invariant: Unfenced, Child: in.Child, Time: gap,
				Detail: fmt.Sprintf("incarnation %d active %s–%s, but at %s this replica did not hold the lease (lease writes: %s)",
					in.Inc, stamp(in.From), endStamp(in), stamp(gap), describeHistory(history, gap)),
			}, true)
		}
	}
	for _, w := range history {
		if w.Client != identity || w.Holder != "" {
			continue
		}
		for _, in := range incs {
			if !in.From.Before(w.Time) {
				continue
			}
			if r.sc.Shards > 1 && (in.Kind != "controller" || !r.leases(in.Child)[w.Name]) {
				// With shards a release concerns the shard's controllers;
				// a store outlives the shards handed over while another is
				// held (the Unfenced check covers it).
				continue
			}
			if end := in.End(); end.IsZero() || end.After(w.Time) {
				what := "its Shutdown had not returned"
				if in.StartOpen || in.StartEnd.After(w.Time) {
					what = "its start call had not returned"
				} else if !in.ShutdownIn {
					what = "it had not been shut down"
				}
				r.violateOnce(fmt.Sprintf("released/%s/%d/%s", in.Child, in.Inc, w.Version), Violation{
					Invariant: ReleasedEarly, Child: in.Child, Time: w.Time,
					Detail: fmt.Sprintf("the lease was released at %s while %s incarnation %d (active since %s, ended %s) was active: %s",
						stamp(w.Time), in.Kind, in.Inc, stamp(in.From), endStamp(in), what),
				}, false)
			}
		}
	}
}

func endStamp(in Incarnation) string {
	if end := in.End(); !end.IsZero() {
		return stamp(end)
	}
	return "(still active)"
}

// shardLease names shard i's Lease (the single lease without shards).
func (r *runner) shardLease(i int) string {
	if r.sc.Shards <= 1 {
		return leaseName
	}
	return fmt.Sprintf("%s-%d", leaseName, i)
}

// leases names the Leases that fence child: its shard's for a controller
// (child "store": every shard's, of which one suffices), the single lease
// without shards.
func (r *runner) leases(child string) map[string]bool {
	if r.sc.Shards <= 1 {
		return map[string]bool{leaseName: true}
	}
	r.mu.Lock()
	c := r.children[child]
	r.mu.Unlock()
	if child == "store" || (c != nil && c.kind == "store") {
		names := map[string]bool{}
		for i := range r.sc.Shards {
			names[r.shardLease(i)] = true
		}
		return names
	}
	return map[string]bool{r.shardLease(r.sc.shardOf(child)): true}
}

// segment is a time this replica held the lease: from a write of its own
// naming it holder to a lease duration after its last such write, or to
// its release.
type segment struct{ from, to time.Time }

func validity(history []leasetest.Write, names map[string]bool) []segment {
	if len(names) > 1 {
		// Held while any of them is: the union of each one's validity (a
		// release of one ends only its own).
		var all []segment
		for name := range names {
			all = append(all, validity(history, map[string]bool{name: true})...)
		}
		slices.SortFunc(all, func(a, b segment) int { return a.from.Compare(b.from) })
		var union []segment
		for _, sg := range all {
			if n := len(union); n > 0 && !sg.from.After(union[n-1].to) {
				if sg.to.After(union[n-1].to) {
					union[n-1].to = sg.to
				}
				continue
			}
			union = append(union, sg)
		}
		return union
	}
	var segs []segment
	for _, w := range history {
		if w.Client != identity || !names[w.Name] {
			continue
		}
		if w.Holder == "" { // released: held no more
			if n := len(segs); n > 0 && segs[n-1].to.After(w.Time) {
				segs[n-1].to = w.Time
			}
			continue
		}
		if w.Holder != identity {
			continue
		}
		end := w.Time.Add(LeaseDuration)
		if n := len(segs); n > 0 && !w.Time.After(segs[n-1].to) {
			if end.After(segs[n-1].to) {
				segs[n-1].to = end
			}
			continue
		}
		segs = append(segs, segment{from: w.Time, to: end})
	}
	return segs
}

// uncovered returns the first moment of [from, to] outside segs.
func uncovered(segs []segment, from, to time.Time) (time.Time, bool) {
	at := from
	for _, s := range segs {
		if s.to.Before(at) || s.to.Equal(at) {
			continue
		}
		if s.from.After(at) {
			return at, true
		}
		at = s.to
		if at.After(to) {
			return time.Time{}, false
		}
	}
	return at, true
}

func describeHistory(history []leasetest.Write, around time.Time) string {
	var parts []string
	for _, w := range history {
		if w.Time.Before(around.Add(-LeaseDuration-time.Second)) || w.Time.After(around.Add(time.Second)) {
			continue
		}
		holder := w.Holder
		if holder == "" {
			holder = "(released)"
		}
		by := w.Client
		if by == "" {
			by = "Steal"
		}
		parts = append(parts, fmt.Sprintf("%s %s by %s", stamp(w.Time), holder, by))
	}
	if len(parts) > 8 {
		parts = append(parts[:2], append([]string{"…"}, parts[len(parts)-6:]...)...)
	}
	return strings.Join(parts, ", ")
}
