package supervise

import (
	"github.com/actorkube/controllermanager/internal/elector"
	"github.com/actorkube/controllermanager/supervisor"
)

// Leadership is a phase of the tree: nothing in Recovering, Starting or
// Running runs without the lease. The elector reports elector.Acquired,
// elector.HolderChanged, elector.Releasing and elector.Lost, the single lease
// being shard 0 of the same messages, and elector.Released after Resign; this
// file is what the supervisor does with them, one handler each, whether
// there is one lease or many.
//
// On Lost the supervisor fences (fence.go): every controller and store the
// lease guards is shut down within Config.FenceTimeout, before another
// replica may acquire the lease. Then, without Config.Reelect, the manager
// fails with lease.ErrLost (the whole shutdown, webhooks included); with
// it, the replica stands down to Electing (standdown.go), webhooks and
// plain runnables still running, and once elected again recovers the
// stores and runs the controllers afresh. A shard the elector hands over is
// released only once its controllers have stopped (release.go).
//
// Fencing runs on Config.Clock, as every timer of the supervisor does.

var resignMessage = elector.Resign{}

// answerElector returns the function that sends msg (HandedOver or Fenced)
// to the elector actor, if it still runs: how the root answers a Releasing
// or a Lost once what they ask for is done.
func (s *root) answerElector(msg any) func() {
	return func() {
		if s.elector != nil {
			s.ctx.Send(s.elector, msg)
		}
	}
}

func (s *root) onShardAcquired(m elector.Acquired) {
	if !s.validShard(m.Shard) {
		return
	}
	if !s.sharded() {
		s.holder = s.cfg.Identity
	}
	s.acquire(m.Shard)
}

// onHolderChanged records who holds the single lease, for Status; with
// shards, Config.ShardHolders says.
func (s *root) onHolderChanged(m elector.HolderChanged) {
	if !s.sharded() && m.Shard == 0 {
		s.holder = m.Identity
	}
}

// acquire records that this replica holds shard i (the single lease is
// shard 0) and runs what it may run now: the stores and controllers of a
// start round waiting in Electing, or, once started, the shard's
// controllers.
func (s *root) acquire(i int) {
	sh := s.shards[i]
	if sh.held {
		return
	}
	sh.held = true
	s.countHeld()
	if s.sharded() {
		s.obs.shardsAcquired.Add(1)
		s.emit(supervisor.Event{Type: supervisor.ShardAcquired, Time: s.now(), Phase: s.phase, Shard: i})
	} else {
		s.emit(supervisor.Event{Type: supervisor.LeaderElected, Time: s.now(), Phase: s.phase})
	}
	if s.shutdown != nil || s.phase.Ended() || s.fencing != nil {
		return // a stand-down in progress resumes the round when it is done
	}
	switch s.phase {
	case supervisor.PhaseElecting:
		if s.start != nil {
			s.start.resume()
		}
	case supervisor.PhaseStarting, supervisor.PhaseRunning:
		s.startShard(i) // a start round in Recovering picks them up itself
	}
}

// startShard starts shard i's controllers, just acquired while Starting or
// Running, outside any start round: a failed start is supervised like any
// failure.
func (s *root) startShard(i int) {
	for _, rec := range s.scope(shardChild(i)) {
		if rec.stopRequested || rec.state.Active() || rec.plan != nil || !s.leaseHeld(rec) {
			continue
		}
		s.startIncarnation(shardStart{s: s, rec: rec}, rec)
	}
}

// shardStart owns the start of a controller whose shard was acquired
// while Starting or Running: a failure is supervised like any.
type shardStart struct {
	s   *root
	rec *childRecord
}

func (shardStart) current(*barrier) bool { return true }
func (st shardStart) settled(_ *barrier, err error) {
	if err != nil && err != errInterrupted {
		st.s.supervise(st.rec, err)
	}
}

// onLeaseReleased: the elector has stopped after Resign, the lease (every
// shard) given up.
func (s *root) onLeaseReleased() {
	if s.elector != nil {
		s.ctx.Stop(s.elector)
		s.elector = nil
	}
	s.maybeFinishAfterLoss()
}

// maybeFinishAfterLoss finishes a shutdown that was waiting for the lease,
// once every child has stopped.
func (s *root) maybeFinishAfterLoss() {
	if s.shutdown == nil {
		return
	}
	for _, rec := range s.children {
		if rec.state.Active() {
			return // releaseLease runs when they have stopped
		}
	}
	s.finish()
}
