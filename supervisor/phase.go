package supervisor

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

// Active reports whether a child in state s may hold resources that only its
// Shutdown releases.
func (s ChildState) Active() bool {
	return s == StateStarting || s == StateRunning || s == StateFailed || s == StateStopping
}
