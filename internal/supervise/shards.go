package supervise

import (
	"fmt"
	"log/slog"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Sharded leadership. With Config.Shards = S > 1 the elector (lease/shard's,
// as an actor) holds some of S shard Leases, and each controller runs only
// while this replica holds the Lease of its Spec.Shard. The single lease is
// the same machinery with one shard, 0: every decision below reads the
// shard's state, so that one path serves both.
//
//   - onShardAcquired (elect.go): Electing with a start round waiting
//     recovers the stores and starts the held shards' controllers; Starting
//     or Running starts the shard's controllers at once.
//   - lose (fence.go): the shard's controllers are fenced within the fence
//     timeout (fencing.begin); when it was the last shard held, the stores
//     too and the replica stands down to Electing (fence.go, (*fencing).standDown), as with
//     the single lease.
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

// shardTable is this replica's leadership: which shards it holds (the
// single lease being shard 0, the one shard), who holds the single lease as
// last observed, and what each shard's loss or hand-over is doing. It owns
// leader and its publication to Observed (set). With election off it holds
// no shard (on is false).
type shardTable struct {
	all     []*shardState
	many    bool             // Config.Shards > 1
	leases  func(int) string // Config.ShardLease
	holders func() []string  // Config.ShardHolders
	self    string           // Config.Identity
	obs     *Observed
	logger  *slog.Logger
	leader  bool   // some shard is held
	held    int    // how many shards are held
	holder  string // the single lease's holder as last observed, for Status
}

// newShardTable is the shard table of cfg: one shard per Config.Shards (the
// single lease being shard 0), none with election off.
func newShardTable(cfg *Config) shardTable {
	t := shardTable{many: cfg.Shards > 1, leases: cfg.ShardLease, holders: cfg.ShardHolders,
		self: cfg.Identity, obs: cfg.Observed, logger: cfg.Logger}
	if cfg.Elector != nil {
		t.all = make([]*shardState, max(cfg.Shards, 1))
		for i := range t.all {
			t.all[i] = &shardState{}
		}
	}
	return t
}

// on reports whether election is on: there are shards to hold.
func (t *shardTable) on() bool { return len(t.all) > 0 }

// sharded reports whether leadership is split into shards.
func (t *shardTable) sharded() bool { return t.many }

// count is how many shards a controller may be pinned to: 1 without shards.
func (t *shardTable) count() int { return max(len(t.all), 1) }

// of is the shard that fences controller rec: its own, or the single lease.
func (t *shardTable) of(rec *childRecord) *shardState {
	if t.many {
		return t.all[rec.spec.Shard]
	}
	return t.all[0]
}

// valid reports whether i, named by the elector, is a shard; it logs one
// that is not.
func (t *shardTable) valid(i int) bool {
	if i < 0 || i >= len(t.all) {
		t.logger.Error("supervisor: the elector named a shard out of range; ignored", "shard", i, "shards", len(t.all))
		return false
	}
	return true
}

// lease names shard i's Lease.
func (t *shardTable) lease(i int) string {
	if t.leases == nil {
		return fmt.Sprint(i)
	}
	return t.leases(i)
}

// set records whether shard i is held, and what follows from it: leader
// (some shard is held) and Observed's counts. It reports whether that
// changed.
func (t *shardTable) set(i int, held bool) bool {
	sh := t.all[i]
	if sh.held == held {
		return false
	}
	sh.held = held
	if held {
		t.held++
	} else {
		t.held--
	}
	t.leader = t.held > 0
	t.obs.leader.Store(t.leader)
	t.obs.shardsHeld.Store(int64(t.held))
	return true
}

// dropAll records that no shard is held any more: the manager has stopped.
func (t *shardTable) dropAll() {
	for i := range t.all {
		t.set(i, false)
	}
}

// observed records the single lease's holder, as the elector observed it
// (this replica, once it has acquired it); with shards, Config.ShardHolders
// says.
func (t *shardTable) observed(shard int, identity string) {
	if !t.many && shard == 0 {
		t.holder = identity
	}
}

// lose records that this replica lost shard i: not held, no hand-over in
// progress, and, with the single lease, not this replica's any more (the
// elector says who holds it next). It reports whether i was held.
func (t *shardTable) lose(i int) bool {
	t.all[i].release = nil
	if !t.many && t.holder == t.self {
		t.holder = ""
	}
	return t.set(i, false)
}

// holdsOtherThan reports whether this replica holds a shard other than i.
func (t *shardTable) holdsOtherThan(i int) bool {
	for j, sh := range t.all {
		if j != i && sh.held {
			return true
		}
	}
	return false
}

// status is Status.Shards: each shard's Lease, holder and controllers
// (children, the hosted children in the order they were added).
func (t *shardTable) status(children []*childRecord) []supervisor.ShardStatus {
	if !t.many {
		return nil
	}
	var holders []string
	if t.holders != nil {
		holders = t.holders()
	}
	st := make([]supervisor.ShardStatus, len(t.all))
	for i, sh := range t.all {
		st[i] = supervisor.ShardStatus{Index: i, Lease: t.lease(i), Held: sh.held}
		if i < len(holders) {
			st[i].Holder = holders[i]
		}
	}
	for _, rec := range children {
		if rec.spec.Kind == actors.KindController && rec.spec.Shard >= 0 && rec.spec.Shard < len(st) {
			st[rec.spec.Shard].Children = append(st[rec.spec.Shard].Children, rec.spec.Name)
		}
	}
	return st
}
