package supervise

import (
	"github.com/actorkube/controllermanager/actors"
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
// it, the replica stands down to Electing (fence.go, (*fencing).standDown), webhooks and
// plain runnables still running, and once elected again recovers the
// stores and runs the controllers afresh. A shard the elector hands over is
// released only once its controllers have stopped (release.go).
//
// Fencing runs on Config.Clock, as every timer of the supervisor does.

var resignMessage = elector.Resign{}

// tellElector sends reply (elector.HandedOver or elector.Fenced; nil: none)
// to the elector actor, if it still runs: how the root answers a Releasing
// or a Lost once what they ask for is done. An operation that is to answer
// holds its reply as a message, not as a closure.
func (s *root) tellElector(reply any) {
	if reply != nil && s.elector != nil {
		s.ctx.Send(s.elector, reply)
	}
}

// onShardAcquired records that this replica holds shard m.Shard (the
// single lease is shard 0) and runs what it may run now: the stores and
// controllers of a start round waiting in Electing, or, once started, the
// shard's controllers. Who holds a lease (elector.HolderChanged) is only
// recorded, for Status; with shards, Config.ShardHolders says.
func (s *root) onShardAcquired(m elector.Acquired) {
	i := m.Shard
	if !s.shards.valid(i) {
		return
	}
	s.shards.observed(i, s.cfg.Identity)
	if !s.shards.set(i, true) {
		return
	}
	if s.shards.sharded() {
		s.obs.shardsAcquired.Add(1)
		s.out.emit(supervisor.Event{Type: supervisor.ShardAcquired, Time: s.clock.now(), Phase: s.state.phase(), Shard: i})
	} else {
		s.out.emit(supervisor.Event{Type: supervisor.LeaderElected, Time: s.clock.now(), Phase: s.state.phase()})
	}
	if s.ending() || s.state.standingDown() != nil {
		return // a stand-down in progress resumes the round when it is done
	}
	switch s.state.phase() {
	case supervisor.PhaseElecting:
		s.state.round().resume() // Electing without a stand-down has a round
	case supervisor.PhaseStarting, supervisor.PhaseRunning:
		s.startShard(i) // a start round in Recovering picks them up itself
	}
}

// startShard starts shard i's controllers, just acquired while Starting or
// Running, outside any start round: a failed start is supervised like any
// failure.
func (s *root) startShard(i int) { s.startUnowned(s.reg.scope(shardChild(i))) }

// startUnowned starts the controllers among recs that may run now and that
// nothing else will start: not stopped by StopChild, not active, not owned
// by a decision in progress (a restart plan, a group's request: they start
// them in their order), under a shard held, and whose groups' stores have
// recovered (level.storesUp). Stores first wins over "a shard acquired while
// Running starts its controllers at once": a controller whose group's
// store is still recovering (restarting, or backing off) waits for it, and
// starts once it has (onChildStarted).
func (s *root) startUnowned(recs []*childRecord) {
	for _, rec := range recs {
		if rec.spec.Kind != actors.KindController || rec.stopRequested || rec.state.Active() || owned(rec) ||
			!s.leaseHeld(rec) || !rec.lvl.storesUp() {
			continue
		}
		s.startIncarnation(shardStart{s: s, rec: rec}, rec)
	}
}

// owned reports whether a decision in progress is to start rec in its
// turn: a restart plan, or a group's request that has still to start it.
func owned(rec *childRecord) bool {
	return rec.plan != nil || (rec.queued() != nil && rec.queued().stage != requestDone)
}

// storesUp reports whether every store of lvl and of the groups above it
// (but the root's, whose stores restart alone) that this replica runs has
// recovered: the order a group starts in, stores first. A child of lvl
// that is not a store starts only then.
func (lvl *level) storesUp() bool {
	s := lvl.s
	for l := lvl; l.parent != nil; l = l.parent {
		for _, c := range l.children {
			if c.spec.Kind == actors.KindStore && !c.stopRequested && s.leaseHeld(c) && c.state != supervisor.StateRunning {
				return false
			}
		}
	}
	return true
}

// storeRecovered starts what waited for a store of lvl, a group's, that
// has just recovered while Starting or Running: the controllers of the
// group (at any depth) whose shard was acquired meanwhile, or that a
// supervised start round left for it (toStart) (startUnowned).
func (lvl *level) storeRecovered() {
	s := lvl.s
	// Starting and Running own no shutdown and no stand-down.
	if p := s.state.phase(); lvl.parent == nil || (p != supervisor.PhaseStarting && p != supervisor.PhaseRunning) {
		return
	}
	s.startUnowned(lvl.appendHosted(nil))
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
	s.state.shutdown().finishIfStopped()
}

// finishIfStopped finishes a, a shutdown that was waiting for the lease
// (nil: none), once every child has stopped.
func (a *shutdownAttempt) finishIfStopped() {
	if a == nil {
		return
	}
	for _, rec := range a.s.reg.children {
		if rec.state.Active() {
			return // releaseLease runs when they have stopped
		}
	}
	a.finish()
}
