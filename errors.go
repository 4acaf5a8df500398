package controllermanager

import (
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/supervisor"
)

// The sentinels a user of this package matches with errors.Is, so that no
// caller needs to import supervisor, actors or lease to test an error this
// package returned. Each is the same value as the one it names, so
// errors.Is(err, ErrUnknownChild) and errors.Is(err,
// supervisor.ErrUnknownChild) agree. ErrNotReady (runtime.go) and
// ErrUnstopped (unstopped.go) sit beside the code that returns them.
// errors_test.go fails when a sentinel of supervisor, actors, lease,
// lease/shard, webhook or health has no alias here.

// Errors of the lifecycle calls (RestartChild, StopChild, StartChild,
// AddChild, RemoveChild, Request) and of Start.
var (
	// ErrUnknownChild: a lifecycle call named no child of the manager.
	ErrUnknownChild = supervisor.ErrUnknownChild
	// ErrBusy: the child is already being started, stopped or restarted.
	ErrBusy = supervisor.ErrBusy
	// ErrNotRunning: a lifecycle call came while the manager was not
	// running: before Start had returned, or while it shuts down.
	ErrNotRunning = supervisor.ErrNotRunning
	// ErrStopped: the manager has stopped; it takes no more lifecycle calls.
	ErrStopped = supervisor.ErrStopped
	// ErrAlreadyRunning: StartChild named a child that runs.
	ErrAlreadyRunning = supervisor.ErrAlreadyRunning
	// ErrNothingToStart: RestartChild named a plain Runnable, which has no
	// start call.
	ErrNothingToStart = supervisor.ErrNothingToStart
	// ErrDuplicateChild: AddChild named a child that exists already.
	ErrDuplicateChild = supervisor.ErrDuplicateChild
	// ErrShardNotHeld: RestartChild or StartChild named a sharded
	// controller whose shard this replica does not hold; it starts once the
	// shard is acquired.
	ErrShardNotHeld = supervisor.ErrShardNotHeld
	// ErrInvalidName: a child's or a group's name is empty, blank or holds
	// a "/" or a control character (Start for what Add, AddStore, AddSharded and NewGroup gave;
	// AddChild). A name is one segment of a child's path. The error quotes
	// the name, its kind and where it was given.
	ErrInvalidName = supervisor.ErrInvalidName
	// ErrStartInterrupted: a start call that a lifecycle call (StartChild,
	// RestartChild, AddChild) waited for was cut short by a concurrent stop
	// of the same child (StopChild, RemoveChild, a lost lease or shard, or
	// a restart of it that its group decided: a sibling's failure under
	// AllForOne or RestForOne, the group restarted whole, which starts it
	// again; an added child stays added); with ErrChildStopped or
	// ErrChildRemoved too when the stop was a StopChild, a RemoveChild or a
	// group's spent budget.
	ErrStartInterrupted = supervisor.ErrStartInterrupted
	// ErrChildStopped: a RestartChild, StartChild or AddChild ended
	// because its child (or a group above it) was stopped meanwhile (a
	// StopChild, or its group's spent budget with OnExhausted Stop): it
	// stays stopped. Also wrapped when such a call is refused because a
	// group above the child is stopped.
	ErrChildStopped = supervisor.ErrChildStopped
	// ErrChildRemoved: a RestartChild, StartChild or AddChild ended
	// because its child (or a group above it) was removed meanwhile: it
	// never runs again.
	ErrChildRemoved = supervisor.ErrChildRemoved
	// ErrShutdown is wrapped by the error Start returns when a shutdown
	// (ShutdownAndWait) began while that Start was still under way, and by
	// a RestartChild or StartChild that a shutdown interrupted. A
	// ShutdownAndWait before any Start answers ErrStopped instead.
	ErrShutdown = supervisor.ErrShutdown
	// ErrStartTwice: Start was called on a manager that had started already.
	ErrStartTwice = supervisor.ErrStartTwice
	// ErrUnknownMessage: Request sent a message of a type the root
	// supervisor does not handle (the lifecycle messages are package
	// supervisor's); the error names the type.
	ErrUnknownMessage = supervisor.ErrUnknownMessage
)

// Errors a child's failure wraps, as ChildFailed events and an
// EscalationError carry it.
var (
	// ErrUnhealthy is wrapped by the failure of a child found unhealthy, or
	// silent, by UnhealthyThreshold health probes in a row.
	ErrUnhealthy = supervisor.ErrUnhealthy
	// ErrReported is the failure of a child whose background work reported
	// a nil error through FailureReporter or ReportFailure.
	ErrReported = actors.ErrReported
	// ErrNoResponse is wrapped by the failure of a webhook whose Handle
	// returned neither a response nor an error.
	ErrNoResponse = actors.ErrNoResponse
)

// Refusals of an admission request before the webhook's Handle runs, in
// the Refused field of the actors.AdmissionResult that answers an
// actors.AdmissionCall; the handler of WebhookHandler answers them with an
// HTTP status instead (WebhookHandler lists which).
var (
	// ErrWebhookUnavailable: the webhook is not running (starting,
	// restarting after a failure, or stopped), or the child named is not a
	// webhook.
	ErrWebhookUnavailable = actors.ErrWebhookUnavailable
	// ErrWebhookNotReady: the webhook's Ready returned false, panicked or
	// did not answer in time.
	ErrWebhookNotReady = actors.ErrWebhookNotReady
	// ErrTooManyRequests: the webhook already runs WebhookConfig.MaxInFlight
	// Handle calls.
	ErrTooManyRequests = actors.ErrTooManyRequests
	// ErrHandlesAbandoned is wrapped by the failure of a webhook's
	// incarnation whose MaxInFlight slots are all held by Handle calls that
	// outlived their requests (a Handle that ignores its context): it is
	// restarted, and its new incarnation has a budget of its own.
	ErrHandlesAbandoned = actors.ErrHandlesAbandoned
)

// Errors of leader election: Err and Serve after a lost lease, the lease
// guards, the lease watchdog.
var (
	// ErrLeaseLost (lease.ErrLost) is wrapped by Err once the manager
	// stopped because it lost its lease (LeaseLostExit), and by a guard's
	// error once the hold it guards was lost.
	ErrLeaseLost = lease.ErrLost
	// ErrLeaseNotHeld (lease.ErrNotHeld) is wrapped by a lease guard's
	// error while this replica cannot prove it holds the lease.
	ErrLeaseNotHeld = lease.ErrNotHeld
	// ErrLeaseRenewalOverdue (lease.ErrRenewalOverdue) is wrapped by the
	// LeaseWatchdog's Check error: the lease is held but not renewed for
	// longer than the lease duration plus the grace.
	ErrLeaseRenewalOverdue = lease.ErrRenewalOverdue
)

// PanicError is a panic in user code, recovered and turned into an error
// that names the child (Child, Kind), the call (Op) and carries what was
// passed to panic (Value) and the stack (Stack); match it with errors.As.
// The fields are documented at actors.PanicError.
type PanicError = actors.PanicError

// EscalationError is why a manager stopped after a child failed more often
// than its restart budget allows, as Err returns it: the Child, its Kind,
// its Restarts within the budget's Window, and its last failure (Err,
// which errors.Is and errors.As see). The fields are documented at
// supervisor.EscalationError.
type EscalationError = supervisor.EscalationError
