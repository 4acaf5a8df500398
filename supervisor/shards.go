package supervisor

import (
	"fmt"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
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
//     timeout (fenceShard); when it was the last shard held, the stores too
//     and the replica goes back to Electing (fence), as with the single lease.
//   - releaseShard (here): a shard the elector hands over is released only
//     once its controllers' Shutdown has returned; after the last one the
//     stores stop too and the replica stands down to Electing.
//
// Stores are fenced by the union of the shards: they run while this replica
// holds at least one. Webhooks and plain runnables are not sharded.

// shardState is this replica's view of one shard.
type shardState struct {
	held      bool     // acquired, and neither lost nor handed over since
	releasing bool     // the elector asked for it back: its controllers are stopping
	fencing   *fencing // its controllers stopping after it was lost, if any
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

// shardOf is rec's shard: its Spec.Shard with sharding, else the single
// lease's.
func (s *root) shardOf(rec *childRecord) *shardState {
	if !s.sharded() {
		return s.shards[0]
	}
	return s.shards[rec.spec.Shard]
}

// shardLease names shard i's Lease.
func (s *root) shardLease(i int) string {
	if s.cfg.ShardLease == nil {
		return fmt.Sprint(i)
	}
	return s.cfg.ShardLease(i)
}

// shardChild is the scope of a lost or released shard: its controllers.
func shardChild(i int) func(*childRecord) bool {
	return func(r *childRecord) bool { return r.spec.Kind == actors.KindController && r.spec.Shard == i }
}

// scope returns the children touches selects, in the order they were added.
func (s *root) scope(touches func(*childRecord) bool) []*childRecord {
	var recs []*childRecord
	for _, rec := range s.children {
		if touches(rec) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// startShard starts shard i's controllers, just acquired while Starting or
// Running, outside any start round: a failed start is supervised like any
// failure.
func (s *root) startShard(i int) {
	for _, rec := range s.scope(shardChild(i)) {
		if rec.stopRequested || rec.state.active() || rec.plan != nil || !s.leaseHeld(rec) {
			continue
		}
		s.startIncarnation(rec, func(err error) {
			if err != nil && err != errInterrupted {
				s.supervise(rec, err)
			}
		})
	}
}

func (s *root) onShardAcquired(m shard.Acquired) {
	if !s.validShard(m.Shard) {
		return
	}
	s.acquire(m.Shard)
}

func (s *root) onShardLost(m shard.Lost) {
	if !s.validShard(m.Shard) {
		return
	}
	reason := m.Reason
	if reason == "" {
		reason = "taken by another replica or not renewed in time"
	}
	s.lose(m.Shard, fmt.Errorf("%w: %s", lease.ErrLost, reason), m.Done)
}

// onHolderChanged records the single lease's holder, as the elector saw it.
func (s *root) onHolderChanged(m shard.HolderChanged) {
	if !s.sharded() && m.Shard == 0 {
		s.holder = m.Identity
	}
}

// onShardReleasing hands shard m.Shard over once its controllers have
// returned from Shutdown: the elector renews its Lease until Done. The last
// shard held is handed over only once the stores have stopped too: they run
// under the union of the shards, so that a replica holding none runs
// nothing fenced. Outside a shutdown that is a stand-down to Electing.
func (s *root) onShardReleasing(m shard.Releasing) {
	if !s.validShard(m.Shard) {
		m.Done()
		return
	}
	i, sh := m.Shard, s.shards[m.Shard]
	if !sh.held {
		m.Done() // lost meanwhile and fenced: nothing of it runs
		return
	}
	sh.releasing = true
	s.quiesce(shardChild(i))
	s.cfg.Logger.Info("shard moving to another replica: stopping its controllers", "shard", i)
	handOver := func() {
		if !sh.releasing {
			m.Done() // lost while stopping; the loss fenced it
			return
		}
		sh.releasing, sh.held = false, false
		s.countHeld()
		if s.sharded() {
			s.obs.shardsReleased.Add(1)
			s.bus.Publish(Event{Type: ShardReleased, Time: s.now(), Phase: s.phase, Shard: i})
		}
		m.Done()
	}
	s.stopAll(s.scope(shardChild(i)), s.boundedContext(), func() {
		switch {
		case !sh.releasing || s.holdsOtherThan(i):
			handOver()
		case s.shutdown != nil && !s.shutdown.releasing:
			// The last shard of a shutdown goes once every child has
			// stopped (releaseLease), as the single lease does; never, if
			// one does not stop.
			s.lastShard = append(s.lastShard, handOver)
		case s.shutdown != nil:
			handOver() // every child has stopped already
		default:
			s.stopFencedThen(handOver)
		}
	})
}

// holdsOtherThan reports whether this replica holds a shard other than i.
func (s *root) holdsOtherThan(i int) bool {
	for j, sh := range s.shards {
		if j != i && sh.held {
			return true
		}
	}
	return false
}

// stopFencedThen stops every controller and store, then runs then: before
// the last shard is handed over outside a shutdown. Started, the replica
// stands down to Electing and waits there for the next shard; fencing, it
// waits for those already stopping.
func (s *root) stopFencedThen(then func()) {
	switch s.phase {
	case PhaseRecovering, PhaseStarting, PhaseRunning:
		if s.shutdown == nil && s.fencing == nil {
			f := &fencing{recs: s.scope(fencedChild), began: s.now()} // no loss: no fence timeout
			s.standDown(f, s.boundedContext(), func() {
				s.fenced(f)
				then()
			})
			return
		}
	}
	s.stopAll(s.scope(fencedChild), s.boundedContext(), then)
}

func (s *root) validShard(i int) bool {
	if i < 0 || i >= len(s.shards) {
		s.cfg.Logger.Error("supervisor: the elector named a shard out of range; ignored", "shard", i, "shards", len(s.shards))
		return false
	}
	return true
}

// shardStatus is Status.Shards.
func (s *root) shardStatus() []ShardStatus {
	if !s.sharded() {
		return nil
	}
	var holders []string
	if s.cfg.ShardHolders != nil {
		holders = s.cfg.ShardHolders()
	}
	st := make([]ShardStatus, len(s.shards))
	for i, sh := range s.shards {
		st[i] = ShardStatus{Index: i, Lease: s.shardLease(i), Held: sh.held}
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
