package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
	"time"
)

// Assign returns the rule's owner of each of shards shards: the identity of
// the member (from members) that should hold it, or "" when there is no
// member. holders[i] is the current holder of shard i as observed ("" when
// none; a holder that is not among members counts as none); holders may be
// shorter than shards. The result depends only on its arguments, not on
// their order, so every replica that sees the same Leases computes the same
// assignment.
//
// The rule (quotas ranked by the shards held, keep up to the quota, fill by
// rendezvous hash), and why it is sticky: docs/leader-election.md, "Who
// holds what: the rule".
func Assign(shards int, members, holders []string) []string {
	return assign(shards, members, holders, nil)
}

// assign is Assign where acquired[i], when given, is when shard i's holder
// acquired it (its Lease's AcquireTime): a member past its quota keeps the
// shards it has held longest, then its highest scores (the rule's step 2 in
// docs/leader-election.md).
func assign(shards int, members, holders []string, acquired []time.Time) []string {
	out := make([]string, shards)
	ms := slices.Compact(slices.Sorted(slices.Values(members)))
	if len(ms) == 0 || shards <= 0 {
		return out
	}
	held := make([][]int, len(ms))
	for s := 0; s < shards && s < len(holders); s++ {
		if i, ok := slices.BinarySearch(ms, holders[s]); ok && holders[s] != "" {
			held[i] = append(held[i], s)
		}
	}

	rank := make([]int, len(ms))
	for i := range rank {
		rank[i] = i
	}
	ceil := (shards + len(ms) - 1) / len(ms)
	slices.SortStableFunc(rank, func(a, b int) int { return min(len(held[b]), ceil) - min(len(held[a]), ceil) })
	quota := make([]int, len(ms))
	for r, i := range rank {
		quota[i] = shards / len(ms)
		if r < shards%len(ms) {
			quota[i]++
		}
	}

	byTenure := len(acquired) == shards
	for i, hs := range held {
		slices.SortStableFunc(hs, func(a, b int) int {
			if byTenure {
				if c := acquired[a].Compare(acquired[b]); c != 0 {
					return c
				}
			}
			return cmp.Compare(score(ms[i], b), score(ms[i], a))
		})
		for _, s := range hs[:min(len(hs), quota[i])] {
			out[s] = ms[i]
			quota[i]--
		}
	}
	for s := range out {
		if out[s] != "" {
			continue
		}
		best := -1
		for i, m := range ms {
			if quota[i] > 0 && (best < 0 || score(m, s) > score(ms[best], s)) {
				best = i
			}
		}
		out[s] = ms[best]
		quota[best]--
	}
	return out
}

// score is the rendezvous hash of identity and shard.
func score(identity string, shard int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity + "\x00" + strconv.Itoa(shard)))
	return h.Sum64()
}

// shardView is what the loop knows of one shard when it reconciles.
type shardView struct {
	assigned    string // the rule's holder of the shard (Assign)
	held        bool   // this replica holds its Lease
	releasing   bool   // handed back already, waiting for done
	fencing     bool   // lost, waiting for the Lost callback's done
	campaigning bool   // a campaign for it in flight
	// heldElsewhere: its Lease names another holder that has not expired
	// (by the local-observation rule); false when it is free (released:
	// an empty holder), expired, missing, or ours.
	heldElsewhere bool
}

// decision is what reconcile does with one shard.
type decision int

const (
	keep        decision = iota // nothing to do
	handBack                    // call Release: the rule gives it to another
	campaignFor                 // send a campaign (if its Lease is free or expired)
)

func (d decision) String() string {
	return [...]string{"keep", "handBack", "campaignFor"}[d]
}

// decide is reconcile's decision for every shard, a pure function of what
// the loop observed and holds: a held shard the rule gives to another is
// handed back once; a shard the rule gives to self that it neither holds,
// fences nor campaigns for already, and that is free or expired, is
// campaigned for, in shard order, as long as fewer than limit campaigns are
// in flight; a stopping replica campaigns for nothing (the rule, with it
// out of the members, hands every shard back).
//
// The single lease (Config.SingleLease) is shard 0 always assigned to self
// while it is not stopping (no members, no rule): it is campaigned for
// whenever it is free or expired, and handed back only on a stop.
func decide(self string, stopping bool, limit int, shards []shardView) []decision {
	out := make([]decision, len(shards))
	inFlight := 0
	for _, s := range shards {
		if s.campaigning {
			inFlight++
		}
	}
	for i, s := range shards {
		switch {
		case s.held && s.assigned != self && !s.releasing:
			out[i] = handBack
		case stopping || s.assigned != self || s.held || s.fencing || s.campaigning || s.heldElsewhere:
		case inFlight < limit:
			out[i] = campaignFor
			inFlight++
		}
	}
	return out
}
