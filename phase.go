package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Phase is where a manager is in its life, one of the constants below, in
// Status.Phase and Event.Phase. Wait for PhaseRunning, or a PhaseChanged
// event, to know the manager has started; Phase.Ended reports a Stopped or
// Failed manager. The moves between the phases are documented in package
// supervisor (go doc supervisor.Phase).
type Phase = supervisor.Phase

// The phases, in order.
const (
	PhaseIdle         = supervisor.PhaseIdle         // constructed, Start not called
	PhaseInitializing = supervisor.PhaseInitializing // pre-flight (Context.Start), then webhooks start
	PhaseElecting     = supervisor.PhaseElecting     // waiting for the lease
	PhaseRecovering   = supervisor.PhaseRecovering   // stores recover, in parallel
	PhaseStarting     = supervisor.PhaseStarting     // controllers run, in parallel
	PhaseRunning      = supervisor.PhaseRunning      // started and supervised
	PhaseShuttingDown = supervisor.PhaseShuttingDown // children shutting down, then the lease is given up
	PhaseStopped      = supervisor.PhaseStopped      // stopped on request
	PhaseFailed       = supervisor.PhaseFailed       // stopped by a failed start, an escalation or a lost lease
)
