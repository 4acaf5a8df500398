package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Phase is where a manager is in its life, one of the constants below, in
// Status.Phase and Event.Phase; the moves between them are documented in
// package supervisor (go doc supervisor.Phase).
type Phase = supervisor.Phase

// The phases, in order.
const (
	PhaseIdle         = supervisor.PhaseIdle
	PhaseInitializing = supervisor.PhaseInitializing
	PhaseElecting     = supervisor.PhaseElecting
	PhaseRecovering   = supervisor.PhaseRecovering
	PhaseStarting     = supervisor.PhaseStarting
	PhaseRunning      = supervisor.PhaseRunning
	PhaseShuttingDown = supervisor.PhaseShuttingDown
	PhaseStopped      = supervisor.PhaseStopped
	PhaseFailed       = supervisor.PhaseFailed
)
