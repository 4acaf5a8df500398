package controllermanager

import (
	"context"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Event is one step of the supervision tree, as Subscribe delivers it.
type Event = supervisor.Event

// EventType says what an Event reports.
type EventType = supervisor.EventType

// The event types (see package supervisor for when each is published).
const (
	PhaseChanged   = supervisor.PhaseChanged
	ChildStarted   = supervisor.ChildStarted
	ChildFailed    = supervisor.ChildFailed
	ChildRestarted = supervisor.ChildRestarted
	ChildStopped   = supervisor.ChildStopped
	ChildUnhealthy = supervisor.ChildUnhealthy
	ChildRemoved   = supervisor.ChildRemoved
	Escalated      = supervisor.Escalated
	LeaderElected  = supervisor.LeaderElected
	LeaderLost     = supervisor.LeaderLost
	EventsDropped  = supervisor.EventsDropped
)

// Phase is where a manager is in its life.
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

// Status is a snapshot of a manager, the answer to supervisor.GetStatus.
type Status = supervisor.Status

// ChildStatus is a snapshot of one child.
type ChildStatus = supervisor.ChildStatus

// PanicError is a panic in user code, recovered and turned into an error
// that names the child and carries the stack.
type PanicError = actors.PanicError

// EscalationError is why a manager stopped after a child failed more often
// than its restart budget allows.
type EscalationError = supervisor.EscalationError

// ReportFailure reports err as a failure of the controller (or webhook, or
// store) whose Run (Start, Recover) received ctx, from any goroutine, at any
// time: the supervisor restarts it as its strategy says. It returns false,
// doing nothing, when ctx did not come from a manager. Keep the function of
// FailureReporter instead when the context will not outlive Run.
func ReportFailure(ctx context.Context, err error) bool {
	return actors.ReportFailure(ctx, err)
}

// FailureReporter returns the function that reports a failure of the child
// whose Run (Start, Recover) received ctx. It stays valid after Run returns;
// reports of an incarnation that has since been stopped are ignored. ok is
// false when ctx did not come from a manager.
func FailureReporter(ctx context.Context) (report func(err error), ok bool) {
	return actors.FailureReporter(ctx)
}
