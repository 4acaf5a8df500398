package supervise

import (
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Sharded leadership. With Config.Shards = S > 1 the elector (lease/shard's,
// as an actor) holds some of S shard Leases, and each controller runs only
// while this replica holds the Lease of its Spec.Shard. The single lease is
// the same machinery with one shard, 0: every decision below reads the
// shard's state, so that one path serves both.
//
//   - acquire (elect.go): Electing with a start round waiting recovers the
//     stores and starts the held shards' controllers; Starting or Running
//     starts the shard's controllers at once.
//   - lose (elect.go): the shard's controllers are fenced within the fence
//     timeout (fenceShard, fence.go); when it was the last shard held, the
//     stores too and the replica stands down to Electing (fence,
//     standdown.go), as with the single lease.
//   - shardRelease (release.go): a shard the elector hands over is released
//     only once its controllers' Shutdown has returned; after the last one
//     the stores stop too and the replica stands down to Electing.
//
// Stores are fenced by the union of the shards: they run while this replica
// holds at least one. Webhooks and plain runnables are not sharded.

// shardState is this replica's view of one shard.
type shardState struct {
	held    bool          // acquired, and neither lost nor handed over since
	release *shardRelease // the elector asked for it back: its hand-over, in progress
	fencing *fencing      // its controllers stopping after it was lost, if any
}

// sharded reports whether leadership is split into shards.
func (s *root) sharded() bool { return s.cfg.Shards > 1 }

// initShards sets up the shards' state: one per shard, the single lease
// being shard 0; none with election off.
func (s *root) initShards() {
	if s.cfg.Elector == nil {
		return
	}
	n := max(s.cfg.Shards, 1)
	s.shards = make([]*shardState, n)
	for i := range s.shards {
		s.shards[i] = &shardState{}
	}
}

// countHeld updates leader (this replica holds some shard) from the shards.
func (s *root) countHeld() {
	held := 0
	for _, sh := range s.shards {
		if sh.held {
			held++
		}
	}
	s.leader = held > 0
	s.obs.leader.Store(s.leader)
	s.obs.shardsHeld.Store(int64(held))
}

// shardStatus is Status.Shards.
func (s *root) shardStatus() []supervisor.ShardStatus {
	if !s.sharded() {
		return nil
	}
	var holders []string
	if s.cfg.ShardHolders != nil {
		holders = s.cfg.ShardHolders()
	}
	st := make([]supervisor.ShardStatus, len(s.shards))
	for i, sh := range s.shards {
		st[i] = supervisor.ShardStatus{Index: i, Lease: s.shardLease(i), Held: sh.held}
		if i < len(holders) {
			st[i].Holder = holders[i]
		}
	}
	for _, rec := range s.children {
		if rec.spec.Kind == actors.KindController && rec.spec.Shard >= 0 && rec.spec.Shard < len(st) {
			st[rec.spec.Shard].Children = append(st[rec.spec.Shard].Children, rec.spec.Name)
		}
	}
	return st
}
