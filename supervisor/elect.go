package supervisor

import (
	"fmt"

	"github.com/actorkube/controllermanager/lease"
)

var resignMessage = lease.Resign{}

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

// onLeaseLost fences: the lease may pass to another replica once the lease
// duration has passed since the last renewal, so every controller stops now,
// within Config.FenceTimeout, and the manager fails with lease.ErrLost.
func (s *root) onLeaseLost(lease.Lost) {
	wasLeader := s.leader
	s.leader = false
	s.obs.leader.Store(false)
	if s.elector != nil {
		s.ctx.Stop(s.elector) // its election has ended; a new one needs a new elector
		s.elector = nil
	}
	if wasLeader {
		s.bus.Publish(Event{Type: LeaderLost, Time: s.now(), Phase: s.phase, Err: lease.ErrLost})
	}
	if s.shutdown != nil || s.phase.Ended() {
		if s.shutdown != nil && s.phase == PhaseShuttingDown && s.elector == nil {
			// We were waiting for Released; there is nothing left to release.
			s.maybeFinishAfterLoss()
		}
		return
	}
	s.beginShutdown(fmt.Errorf("%w: not renewed within the renew deadline", lease.ErrLost), s.fenceContext())
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
