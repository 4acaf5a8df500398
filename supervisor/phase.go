package supervisor

import "fmt"

// Phase is where a manager is in its life.
type Phase string

// The phases, in the order a manager goes through them.
const (
	PhaseIdle         Phase = "Idle"         // constructed, Start not called
	PhaseInitializing Phase = "Initializing" // pre-flight (Context.Start), then webhooks start
	PhaseElecting     Phase = "Electing"     // waiting for the lease
	PhaseRecovering   Phase = "Recovering"   // stores recover, in parallel
	PhaseStarting     Phase = "Starting"     // controllers run, in parallel
	PhaseRunning      Phase = "Running"      // started and supervised
	PhaseShuttingDown Phase = "ShuttingDown" // children shutting down, then the lease is given up
	PhaseStopped      Phase = "Stopped"      // stopped on request
	PhaseFailed       Phase = "Failed"       // stopped by a failed start, an escalation or a lost lease
)

// Phases lists every phase in order, in a new slice at each call (the
// manager's metrics label one series per phase).
func Phases() []Phase {
	return []Phase{
		PhaseIdle, PhaseInitializing, PhaseElecting, PhaseRecovering, PhaseStarting,
		PhaseRunning, PhaseShuttingDown, PhaseStopped, PhaseFailed,
	}
}

// Ended reports whether p is a final phase.
func (p Phase) Ended() bool { return p == PhaseStopped || p == PhaseFailed }

// ChildState is where a child is, as GetStatus reports it.
type ChildState string

// The states of a child.
const (
	StatePending    ChildState = "Pending"    // added; not started yet
	StateStarting   ChildState = "Starting"   // its start call (Run, Recover, Start) is running
	StateRunning    ChildState = "Running"    // started and supervised
	StateFailed     ChildState = "Failed"     // its start call failed; being handled
	StateBackingOff ChildState = "BackingOff" // shut down after a failure, waiting to start again
	StateStopping   ChildState = "Stopping"   // its Shutdown is running
	StateStopped    ChildState = "Stopped"    // shut down (by StopChild, or with the manager)
)

// active reports whether a child in state s may hold resources that only its
// Shutdown releases.
func (s ChildState) active() bool {
	return s == StateStarting || s == StateRunning || s == StateFailed || s == StateStopping
}

// legalMoves is every move of the manager's phase, from → the phases it may
// go to. The start round goes down the first column in order (Initializing
// skips Electing without election, and goes straight to Running for a
// webhook or base manager); a lost lease, or the last shard handed over,
// takes a replica that has begun recovering back to Electing; every phase
// but the final ones may shut down.
var legalMoves = map[Phase][]Phase{
	PhaseIdle:         {PhaseInitializing, PhaseShuttingDown},
	PhaseInitializing: {PhaseElecting, PhaseRecovering, PhaseRunning, PhaseShuttingDown},
	PhaseElecting:     {PhaseRecovering, PhaseShuttingDown},
	PhaseRecovering:   {PhaseStarting, PhaseElecting, PhaseShuttingDown},
	PhaseStarting:     {PhaseRunning, PhaseElecting, PhaseShuttingDown},
	PhaseRunning:      {PhaseElecting, PhaseShuttingDown},
	PhaseShuttingDown: {PhaseStopped, PhaseFailed},
	PhaseStopped:      nil,
	PhaseFailed:       nil,
}

// legalMove reports whether the phase may go from from to to.
func legalMove(from, to Phase) bool {
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
func (s *root) become(to Phase, why string) {
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
	s.emit(Event{Type: PhaseChanged, Time: s.now(), Phase: to})
}
