package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// Errors of the root supervisor, matched with errors.Is.
var (
	// ErrUnknownChild: a lifecycle message named no child of the manager.
	ErrUnknownChild = errors.New("supervisor: unknown child")
	// ErrNotRunning: a lifecycle message arrived while the manager was not Running.
	ErrNotRunning = errors.New("supervisor: manager not running")
	// ErrBusy: the child is already being started, stopped or restarted.
	ErrBusy = errors.New("supervisor: child busy")
	// ErrStopped: the manager has stopped; it takes no more requests.
	ErrStopped = errors.New("supervisor: manager stopped")
	// ErrUnhealthy is wrapped by the failure of a child found unhealthy or
	// silent by UnhealthyThreshold health probes in a row.
	ErrUnhealthy = errors.New("supervisor: unhealthy")
	// ErrShutdown is wrapped by the error Start returns when a shutdown
	// (ShutdownAndWait) began while that Start was still under way. A
	// ShutdownAndWait before any Start answers ErrStopped instead.
	ErrShutdown = errors.New("supervisor: shut down during start")
	// ErrUnknownMessage: a request of a type the supervisor does not handle.
	ErrUnknownMessage = errors.New("supervisor: unknown message")
	// ErrStartTwice: Start was called on a manager that had already started.
	ErrStartTwice = errors.New("supervisor: manager already started")
	// ErrUnstopped is wrapped by an *UnstoppedError: a shutdown's context
	// ended before every child's Shutdown had returned.
	ErrUnstopped = errors.New("supervisor: children did not stop")
	// ErrNothingToStart: RestartChild named a plain runnable, which has no
	// start call.
	ErrNothingToStart = errors.New("supervisor: a plain runnable has nothing to start")
	// ErrAlreadyRunning: StartChild named a child that is running.
	ErrAlreadyRunning = errors.New("supervisor: child already running")
	// ErrDuplicateChild: AddChild named a child that exists already.
	ErrDuplicateChild = errors.New("supervisor: duplicate child")
	// ErrShardNotHeld: RestartChild or StartChild named a controller whose
	// shard this replica does not hold; it starts once the shard is
	// acquired.
	ErrShardNotHeld = errors.New("supervisor: the child's shard is not held by this replica")
	// ErrInvalidName is wrapped by the error that refuses a child's or a
	// group's name (at Start for what Add, AddStore, AddSharded and NewGroup
	// gave; at AddChild): an empty or blank name, or one holding a "/" or a
	// control character (a newline, a tab). A
	// name is one segment of a path ("tenant-a/store" is the child "store"
	// of the group "tenant-a"), at the root as in a group. The error quotes
	// the name, its kind and where it was given.
	ErrInvalidName = errors.New("supervisor: invalid name")
	// ErrStartInterrupted: a start call that a lifecycle call (StartChild,
	// RestartChild, AddChild) waited for was cut short by a concurrent stop
	// of the same child (StopChild, RemoveChild, a lost lease or shard, or
	// a restart of it that its group decided: a sibling's failure under
	// AllForOne or RestForOne, the group restarted whole, which starts it
	// again). An added child stays added. When the stop was a StopChild, a
	// RemoveChild or a group's spent budget, the error also wraps
	// ErrChildStopped or ErrChildRemoved.
	ErrStartInterrupted = errors.New("supervisor: start interrupted by a stop")
	// ErrChildStopped: a RestartChild, StartChild or AddChild ended
	// because its child (or a group above it) was stopped meanwhile, by a
	// StopChild or its group's spent budget: it stays stopped. It is also
	// wrapped when such a call is refused because a group above the child
	// is stopped (StartChild of that group starts it).
	ErrChildStopped = errors.New("supervisor: child stopped meanwhile")
	// ErrChildRemoved: a RestartChild, StartChild or AddChild ended
	// because its child (or a group above it) was removed meanwhile by a
	// RemoveChild: it never runs again.
	ErrChildRemoved = errors.New("supervisor: child removed meanwhile")
	// ErrClusterOffline is wrapped by the error of a StartChild or
	// RestartChild of an Offline member cluster's group of a fleet, or of
	// anything in it (controllermanager.ErrClusterOffline, the same
	// value): the fleet starts the group itself once the cluster answers.
	// It is here, with the other refusals of a lifecycle message, so that
	// what answers those messages (the live view's controls) can tell a
	// refusal by state from a server error.
	ErrClusterOffline = errors.New("controllermanager: cluster offline")
)

// Unstopped is a child whose Shutdown had not returned when a shutdown's
// context ended: its name, kind, how long its Shutdown had run, and the
// stack of the goroutine running it.
type Unstopped = actors.Unstopped

// UnstoppedError says which children had not returned from Shutdown when a
// shutdown's context ended (ShutdownAndWait gave up waiting). Its message
// names them and how long each had run; Children carries their stacks.
// errors.Is sees ErrUnstopped.
type UnstoppedError struct {
	Children []Unstopped
}

// Error lists the children that did not stop.
func (e *UnstoppedError) Error() string {
	names := make([]string, len(e.Children))
	for i, u := range e.Children {
		names[i] = u.String()
	}
	return fmt.Sprintf("%v: %s", ErrUnstopped, strings.Join(names, ", "))
}

// Unwrap returns ErrUnstopped.
func (e *UnstoppedError) Unwrap() error { return ErrUnstopped }

// EscalationError is why a manager stopped after a child failed more often
// than its restart budget allows. errors.Is and errors.As see the child's
// last failure.
type EscalationError struct {
	Child    string
	Kind     actors.Kind
	Restarts int           // restarts within the window before the last failure
	Window   time.Duration // the budget's window
	Err      error         // the child's last failure
}

// Error names the child, its failures within the window and its last failure.
func (e *EscalationError) Error() string {
	return fmt.Sprintf("supervisor: %s %q failed %d times within %s, more than its restart budget allows: %v",
		e.Kind, e.Child, e.Restarts+1, e.Window, e.Err)
}

// Unwrap returns the child's last failure.
func (e *EscalationError) Unwrap() error { return e.Err }
