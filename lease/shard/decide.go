package shard

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
