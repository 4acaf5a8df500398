package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
)

// Leadership is a phase of the tree: nothing in Recovering, Starting or
// Running runs without the lease. The elector (package lease) reports
// Elected, NewLeader, Lost and Released; this file is what the supervisor
// does with them.
//
// On Lost the supervisor fences: every controller and store is shut down
// within Config.FenceTimeout, before another replica may acquire the lease.
// Then, without Config.Reelect, the manager fails with lease.ErrLost (the
// whole shutdown, webhooks included); with it, the manager goes back to
// Electing, webhooks and plain runnables still running, and once elected
// again recovers the stores and runs the controllers afresh.
//
// Fencing runs on Config.Clock, as every timer of the supervisor does. The
// single lease's own timing is client-go's, on real time: a test that
// injects a fake clock (WithClock) steps it past the fence timeout itself
// when it wants to see a fence overdue. The shard elector runs on the same
// injected clock.

var resignMessage = lease.Resign{}

// fencing is the stop, after a lost lease, of what the lease guards.
type fencing struct {
	cause error
	recs  []*childRecord // the controllers and stores being stopped
	began time.Time
	timer clock.Timer // fenceOverdue at Config.FenceTimeout
	done  bool
}

// fenceOverdue: a fencing's children have not all stopped within
// Config.FenceTimeout.
type fenceOverdue struct{ f *fencing }

func (s *root) onElected(m lease.Elected) {
	s.holder = m.Identity
	s.acquire(0)
}

func (s *root) onNewLeader(m lease.NewLeader) {
	s.holder = m.Identity
}

// onLeaseLost fences: the lease may pass to another replica once the
// elector's FenceBudget has passed, so every controller and store stops now.
func (s *root) onLeaseLost(m lease.Lost) {
	if s.holder == s.cfg.Identity {
		s.holder = "" // not us any more; the next elector says who
	}
	if s.elector != nil {
		s.ctx.Stop(s.elector) // its election has ended; a new one needs a new elector
		s.elector = nil
	}
	reason := m.Reason // the elector's words, which it also logged
	if reason == "" {
		reason = "not renewed within the renew deadline"
	}
	s.lose(0, fmt.Errorf("%w: %s", lease.ErrLost, reason), nil)
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
		s.bus.Publish(Event{Type: ShardAcquired, Time: s.now(), Phase: s.phase, Shard: i})
	} else {
		s.bus.Publish(Event{Type: LeaderElected, Time: s.now(), Phase: s.phase})
	}
	if s.shutdown != nil || s.phase.Ended() || s.fencing != nil {
		return // a fencing in progress goes on to elect() when it is done
	}
	switch s.phase {
	case PhaseElecting:
		if s.start != nil {
			s.recoverStores()
		}
	case PhaseStarting, PhaseRunning:
		s.startShard(i) // a start round in Recovering picks them up itself
	}
}

// lose records that this replica lost shard i (the single lease is shard 0)
// and fences what ran under it. done, when not nil, lets the elector
// campaign for the shard again; it is called once the shard's children have
// stopped, with Reelect only.
func (s *root) lose(i int, cause error, done func()) {
	sh := s.shards[i]
	wasHeld := sh.held
	sh.held, sh.releasing = false, false
	s.countHeld()
	if s.sharded() {
		s.obs.shardsLost.Add(1)
		cause = fmt.Errorf("shard %d (Lease %s): %w", i, s.shardLease(i), cause)
		s.bus.Publish(Event{Type: ShardLost, Time: s.now(), Phase: s.phase, Shard: i, Err: cause})
	} else if wasHeld {
		s.bus.Publish(Event{Type: LeaderLost, Time: s.now(), Phase: s.phase, Err: lease.ErrLost})
	}
	if s.shutdown != nil || s.phase.Ended() {
		if s.shutdown != nil && s.phase == PhaseShuttingDown {
			if !s.sharded() {
				// It may have been waiting for Released; there is nothing left to release.
				s.maybeFinishAfterLoss()
			}
			if !s.phase.Ended() {
				// Still waiting for Shutdown calls, now without the lease:
				// they are bounded by the fence timeout as after any loss.
				scope := fencedChild
				if s.sharded() && s.leader {
					scope = shardChild(i)
				}
				if f := s.armFence(cause, scope); f != nil {
					sh.fencing = f
				}
			}
		}
		return // a shard lost during a shutdown is not campaigned for again
	}
	if s.leader {
		s.fenceShard(i, cause, done) // other shards are held: only this one's controllers stop
		return
	}
	s.fence(cause, done)
}

// fence stops every controller and store, with Shutdown contexts that end at
// three quarters of Config.FenceTimeout; at its end, any of them still
// shutting down fails the manager (onFenceOverdue). Without Reelect the
// whole manager shuts down and fails with cause; with it, the manager goes
// back to Electing and, once all have stopped, campaigns again: done (the
// lost shard's, if any) is called and, with the single lease, a new elector
// spawned.
func (s *root) fence(cause error, done func()) {
	f, ctx := s.beginFencing(cause, s.scope(fencedChild))
	s.fencing = f
	s.cfg.Logger.Warn("lease lost: fencing", "children", len(f.recs), "timeout", s.fenceTimeout(), "reelect", s.cfg.Reelect)
	if s.exitOnLoss(f, ctx) {
		return
	}
	s.standDown(f, ctx, func() {
		s.fenced(f)
		if done != nil {
			done()
		}
	})
}

// beginFencing starts the fencing of recs after cause: their Shutdown
// contexts (ctx) end at three quarters of the fence timeout, and at its end
// onFenceOverdue fails the manager if any of them is still active.
func (s *root) beginFencing(cause error, recs []*childRecord) (*fencing, context.Context) {
	timeout := s.fenceTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout*3/4)
	_ = cancel // released at the deadline; the children hold it until then
	f := &fencing{cause: cause, recs: recs, began: s.now()}
	f.timer = s.cfg.Clock.AfterFunc(timeout, s.timerSend(func() any { return fenceOverdue{f: f} }))
	return f, ctx
}

// exitOnLoss is a lost lease (or shard) without Reelect: the whole manager
// shuts down with f's cause, its children's Shutdown bounded by ctx, and f
// only sees its own children stop. It reports whether it did.
func (s *root) exitOnLoss(f *fencing, ctx context.Context) bool {
	if s.cfg.Reelect {
		return false
	}
	s.beginShutdown(f.cause, ctx)
	s.stopAll(f.recs, ctx, func() { s.fenced(f) })
	return true
}

// standDown takes the replica back to Electing, f (a fencing) in progress
// until every controller and store has stopped with ctx: a start in
// progress (Recovering, Starting) is abandoned, the Start call, if any,
// waiting for the next round; webhooks and plain runnables run on (a
// webhook's restart in progress goes on), and their liveness probes too, as
// on any standby. Once all have stopped, stopped runs and the replica
// elects again.
func (s *root) standDown(f *fencing, ctx context.Context, stopped func()) {
	s.fencing = f
	if s.start != nil {
		s.start = s.nextRound(s.start)
	}
	s.quiesce(fencedChild)
	s.obs.starting.Store(false)
	s.obs.started.Store(false)
	s.setPhase(PhaseElecting)
	s.stopAll(f.recs, ctx, func() {
		stopped()
		if s.fencing != f || s.shutdown != nil || s.phase.Ended() {
			return
		}
		s.fencing = nil
		if s.start == nil {
			s.start = s.nextRound(nil)
		}
		s.elect()
	})
}

// fenceShard stops shard i's controllers after its Lease was lost while this
// replica holds other shards, bounded by the fence timeout as fence is;
// the other shards' children and the stores run on. Without Reelect the
// whole manager shuts down and fails with cause (Exit: a lost shard stops
// the manager); with it, done lets the elector campaign for the shard again
// once they have stopped.
func (s *root) fenceShard(i int, cause error, done func()) {
	sh := s.shards[i]
	f, ctx := s.beginFencing(cause, s.scope(shardChild(i)))
	sh.fencing = f
	s.cfg.Logger.Warn("shard lost: fencing", "shard", i, "children", len(f.recs), "timeout", s.fenceTimeout(), "reelect", s.cfg.Reelect)
	if s.exitOnLoss(f, ctx) {
		return
	}
	s.quiesce(shardChild(i))
	s.stopAll(f.recs, ctx, func() {
		s.fenced(f)
		if sh.fencing == f {
			sh.fencing = nil
		}
		if done != nil && s.shutdown == nil && !s.phase.Ended() {
			done()
		}
	})
}

// armFence bounds, by the fence timeout, the children in scope already
// shutting down when the lease is lost during a shutdown: past it, any of
// them still active fails the manager (onFenceOverdue), since it may run
// while another replica leads. It returns the fencing, or nil when none of
// them is active.
func (s *root) armFence(cause error, scope func(*childRecord) bool) *fencing {
	active := s.scope(func(rec *childRecord) bool { return scope(rec) && rec.state.active() })
	if len(active) == 0 {
		return nil
	}
	f, _ := s.beginFencing(cause, active) // they are stopping with contexts of their own already
	return f
}

// fenced records that every child f stops has stopped.
func (s *root) fenced(f *fencing) {
	if f.done {
		return
	}
	f.done = true
	if f.timer != nil {
		f.timer.Stop()
	}
	if f.cause != nil {
		s.cfg.Logger.Warn("lease lost: fenced", "took", s.cfg.Clock.Since(f.began))
	}
}

// onFenceOverdue fails the manager when a controller or store has not
// returned from Shutdown within Config.FenceTimeout after a lost lease: it
// may still be running while another replica takes the lease over. The
// manager stops at once, without waiting for it, so that Done tells the
// host to exit, the only fence left.
func (s *root) onFenceOverdue(m fenceOverdue) {
	f := m.f
	if f.done || s.phase.Ended() {
		return
	}
	var stuck []string
	for _, rec := range f.recs {
		if rec.state.active() {
			stuck = append(stuck, fmt.Sprintf("%s %q", rec.spec.Kind, rec.spec.Name))
		}
	}
	if len(stuck) == 0 {
		return
	}
	err := fmt.Errorf("%w; not fenced: %s did not return from Shutdown within %s, and may still run while another replica leads",
		f.cause, strings.Join(stuck, ", "), s.fenceTimeout())
	s.cfg.Logger.Error("lease lost: fencing incomplete, the process must exit", "err", err)
	f.done = true
	if s.shutdown == nil {
		s.beginShutdown(err, s.boundedContext())
	}
	s.shutdown.cause = err
	s.finish()
}

// nextRound returns the start attempt of a new election round. A Start call
// still waiting (prev) keeps waiting for it; the abandoned round's
// continuations, which hold prev, are ignored from now on.
func (s *root) nextRound(prev *startAttempt) *startAttempt {
	a := &startAttempt{timeout: s.startTimeout}
	if prev != nil {
		if prev.cancelBounded != nil {
			prev.cancelBounded()
		}
		a.replyTo, a.ctx, a.cancel = prev.replyTo, prev.ctx, prev.cancel
	} else {
		a.ctx, a.cancel = context.WithCancel(s.lifetimeContext())
	}
	ctx := a.ctx
	context.AfterFunc(ctx, func() { s.sendSelf(startExpired{attempt: a, err: context.Cause(ctx)}) })
	return a
}

// toStart is what a start round starts of kind: every child of that kind
// but those stopped by StopChild, those still running (webhooks and plain
// runnables outlive a lost lease) and those whose shard this replica does
// not hold.
func (s *root) toStart(kind actors.Kind) []*childRecord {
	var recs []*childRecord
	for _, rec := range s.ofKind(kind) {
		if !rec.stopRequested && !rec.state.active() && s.leaseHeld(rec) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// fenceTimeout is Config.FenceTimeout, or Timing.ShutdownTimeout without it.
func (s *root) fenceTimeout() time.Duration {
	if s.cfg.FenceTimeout > 0 {
		return s.cfg.FenceTimeout
	}
	return s.cfg.Timing.ShutdownTimeout
}

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
		if rec.state.active() {
			return // releaseLease runs when they have stopped
		}
	}
	s.finish()
}
