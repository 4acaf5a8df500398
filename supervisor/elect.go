package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

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
// Fencing runs on the real clock, whatever Config.Clock is: the lease's
// timing is client-go's, which is real time.

var resignMessage = lease.Resign{}

// fencing is the stop, after a lost lease, of what the lease guards.
type fencing struct {
	cause error
	recs  []*childRecord // the controllers and stores being stopped
	began time.Time
	timer *time.Timer // fenceOverdue at Config.FenceTimeout
	done  bool
}

// fenceOverdue: a fencing's children have not all stopped within
// Config.FenceTimeout.
type fenceOverdue struct{ f *fencing }

func (s *root) onElected(m lease.Elected) {
	s.leader = true
	s.holder = m.Identity
	s.obs.leader.Store(true)
	s.bus.Publish(Event{Type: LeaderElected, Time: s.now(), Phase: s.phase})
	if s.phase == PhaseElecting && s.start != nil {
		s.recoverStores()
	}
}

func (s *root) onNewLeader(m lease.NewLeader) {
	s.holder = m.Identity
}

// onLeaseLost fences: the lease may pass to another replica once the
// elector's FenceBudget has passed, so every controller and store stops now.
func (s *root) onLeaseLost(m lease.Lost) {
	wasLeader := s.leader
	s.leader = false
	s.obs.leader.Store(false)
	if s.holder == s.cfg.Identity {
		s.holder = "" // not us any more; the next elector says who
	}
	if s.elector != nil {
		s.ctx.Stop(s.elector) // its election has ended; a new one needs a new elector
		s.elector = nil
	}
	if wasLeader {
		s.bus.Publish(Event{Type: LeaderLost, Time: s.now(), Phase: s.phase, Err: lease.ErrLost})
	}
	reason := m.Reason // the elector's words, which it also logged
	if reason == "" {
		reason = "not renewed within the renew deadline"
	}
	cause := fmt.Errorf("%w: %s", lease.ErrLost, reason)
	if s.shutdown != nil || s.phase.Ended() {
		if s.shutdown != nil && s.phase == PhaseShuttingDown {
			// It may have been waiting for Released; there is nothing left to release.
			s.maybeFinishAfterLoss()
			if !s.phase.Ended() {
				// Still waiting for Shutdown calls, now without the lease:
				// they are bounded by the fence timeout as after any loss.
				s.armFence(cause)
			}
		}
		return
	}
	s.fence(cause)
}

// fence stops every controller and store, with Shutdown contexts that end at
// three quarters of Config.FenceTimeout; at its end, any of them still
// shutting down fails the manager (onFenceOverdue). Without Reelect the
// whole manager shuts down and fails with cause; with it, the manager goes
// back to Electing and a new elector campaigns once all have stopped.
func (s *root) fence(cause error) {
	timeout := s.fenceTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout*3/4)
	_ = cancel // released at the deadline; the children hold it until then
	f := &fencing{cause: cause, began: time.Now()}
	s.fencing = f
	f.timer = time.AfterFunc(timeout, func() { s.sendSelf(fenceOverdue{f: f}) })
	for _, rec := range s.children {
		if fencedChild(rec) {
			f.recs = append(f.recs, rec)
		}
	}
	s.cfg.Logger.Warn("lease lost: fencing", "children", len(f.recs), "timeout", timeout, "reelect", s.cfg.Reelect)

	if !s.cfg.Reelect {
		s.beginShutdown(cause, ctx)
		// The shutdown stops every child; this second barrier only sees the
		// fenced ones stop.
		s.stopAll(f.recs, ctx, func() { s.fenced(f) })
		return
	}

	if s.start != nil {
		// A start in progress (Recovering, Starting) is abandoned; the Start
		// call, if any, waits for the next election.
		s.start = s.nextRound(s.start)
	}
	// Only what the lease fences stops: webhooks and plain runnables run on
	// (a webhook's restart in progress goes on), and their liveness probes
	// too, as on any standby.
	s.quiesce(fencedChild)
	s.obs.starting.Store(false)
	s.obs.started.Store(false)
	s.setPhase(PhaseElecting)
	s.stopAll(f.recs, ctx, func() {
		s.fenced(f)
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

// armFence bounds, by the fence timeout, the fenced children already
// shutting down when the lease is lost during a shutdown: past it, any of
// them still active fails the manager (onFenceOverdue), since it may run
// while another replica leads.
func (s *root) armFence(cause error) {
	if s.fencing != nil {
		return
	}
	f := &fencing{cause: cause, began: time.Now()}
	for _, rec := range s.children {
		if fencedChild(rec) && rec.state.active() {
			f.recs = append(f.recs, rec)
		}
	}
	if len(f.recs) == 0 {
		return
	}
	s.fencing = f
	f.timer = time.AfterFunc(s.fenceTimeout(), func() { s.sendSelf(fenceOverdue{f: f}) })
}

// fenced records that every child f stops has stopped.
func (s *root) fenced(f *fencing) {
	if f.done {
		return
	}
	f.done = true
	f.timer.Stop()
	s.cfg.Logger.Warn("lease lost: fenced", "took", time.Since(f.began))
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
// but those stopped by StopChild and those still running (webhooks and
// plain runnables outlive a lost lease).
func (s *root) toStart(kind actors.Kind) []*childRecord {
	var recs []*childRecord
	for _, rec := range s.ofKind(kind) {
		if !rec.stopRequested && !rec.state.active() {
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
