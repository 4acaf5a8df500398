package supervise

import (
	"fmt"

	"github.com/actorkube/controllermanager/supervisor"
)

// legalMoves is every move of the manager's phase, from → the phases it may
// go to. The start round goes down the first column in order (Initializing
// skips Electing without election, and goes straight to Running for a
// webhook or base manager); a lost lease, or the last shard handed over,
// takes a replica that has begun recovering back to Electing; every phase
// but the final ones may shut down.
var legalMoves = map[supervisor.Phase][]supervisor.Phase{
	supervisor.PhaseIdle:         {supervisor.PhaseInitializing, supervisor.PhaseShuttingDown},
	supervisor.PhaseInitializing: {supervisor.PhaseElecting, supervisor.PhaseRecovering, supervisor.PhaseRunning, supervisor.PhaseShuttingDown},
	supervisor.PhaseElecting:     {supervisor.PhaseRecovering, supervisor.PhaseShuttingDown},
	supervisor.PhaseRecovering:   {supervisor.PhaseStarting, supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseStarting:     {supervisor.PhaseRunning, supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseRunning:      {supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseShuttingDown: {supervisor.PhaseStopped, supervisor.PhaseFailed},
	supervisor.PhaseStopped:      nil,
	supervisor.PhaseFailed:       nil,
}

// legalMove reports whether the phase may go from from to to.
func legalMove(from, to supervisor.Phase) bool {
	for _, p := range legalMoves[from] {
		if p == to {
			return true
		}
	}
	return false
}

// become is the one way the manager's phase moves: to the phase it is in
// already is nothing; a move that legalMoves does not list is a bug of this
// package and panics, naming both phases, which Receive turns into an
// internal error (the manager fails, the stack logged). why says what moved
// it, for the log.
func (s *root) become(to supervisor.Phase, why string) {
	from := s.phase
	if from == to {
		return
	}
	if !legalMove(from, to) {
		panic(fmt.Sprintf("supervisor: illegal phase move %s → %s (%s)", from, to, why))
	}
	s.phase = to
	s.obs.setPhase(to)
	s.cfg.Logger.Debug("phase changed", "from", from, "phase", to, "why", why)
	s.out.emit(supervisor.Event{Type: supervisor.PhaseChanged, Time: s.clock.now(), Phase: to})
}

// ending reports whether the manager is on its way out: a shutdown has
// begun, or the manager has stopped. Nothing new begins then (a start, a
// restart, a fencing's next step); what is in flight is answered
// ErrShutdown or left to the shutdown.
func (s *root) ending() bool { return s.shutdown != nil || s.phase.Ended() }
