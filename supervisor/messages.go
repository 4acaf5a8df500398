package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// Lifecycle messages: sent to the root supervisor with Ask (or a manager's
// Request), or by an actor with Request. Each is answered with a Reply once
// it has taken effect, or with a Reply whose Err says why it could not.

// RestartChild restarts the named controller, webhook or store: Shutdown,
// then its start call again, without backoff and without counting against
// its restart budget. A stopped child is started. Answered once the start
// call has returned.
type RestartChild struct{ Name string }

// StopChild shuts the named child down; it stays stopped (it is not a
// failure, and it is not supervised) until StartChild or RestartChild.
// Answered once its Shutdown has returned.
type StopChild struct{ Name string }

// StartChild starts a child stopped by StopChild. Answered once its start
// call has returned; a start that fails is answered with the error and is
// then handled as a failure of the child.
type StartChild struct{ Name string }

// AddChild adds a child to a running manager and starts it at once; it is
// then supervised like the others. Runnable is a Controller, Webhook, Store
// or plain Runnable. Name is the child's name; when empty it is taken from
// the value's Name method (a Store, a Webhook or a Controller implementing
// actors.Namer). Answered once its start call has returned.
type AddChild struct {
	Name     string
	Runnable any
}

// RemoveChild shuts the named child down and removes it: it is gone from
// health and status. Answered once its Shutdown has returned.
type RemoveChild struct{ Name string }

// GetStatus asks for the manager's Status. Answered with a Reply whose Value
// is a Status. After the manager has stopped, the final Status.
type GetStatus struct{}

// Reply answers every request to the root supervisor.
type Reply struct {
	Value any   // the answer (a Status for GetStatus), or nil
	Err   error // why the request failed, or nil
}

// Status is a snapshot of the manager.
type Status struct {
	Phase          Phase
	Leader         bool   // this replica holds the lease (always false with election off)
	Identity       string // this replica's lease identity; empty with election off
	LeaderIdentity string // the holder last observed; empty with election off or before one is seen
	Err            error  // why the manager stopped, once it has (nil after a requested shutdown)
	Children       []ChildStatus
}

// ChildStatus is a snapshot of one child.
type ChildStatus struct {
	Name      string
	Kind      actors.Kind
	State     ChildState
	Restarts  int       // times its start call ran after the first, whatever asked for it (failure, RestartChild, StartChild)
	Failures  int       // failures seen (each published as one ChildFailed)
	Healthy   bool      // from the last health probe (true until probed)
	Message   string    // the last probe's message, if any
	LastError error     // the last failure, or nil
	Since     time.Time // when it entered State
}

// Child returns the status of the named child.
func (s Status) Child(name string) (ChildStatus, bool) {
	for _, c := range s.Children {
		if c.Name == name {
			return c, true
		}
	}
	return ChildStatus{}, false
}

// Messages between a manager's facade and its root supervisor.

// StartManager starts the manager with Children (in the order they were
// added). StartTimeout > 0 bounds recovery plus start. Ctx is the caller's:
// its end cancels the start. Answered once the manager is Running, or with
// the error that ended the start.
type StartManager struct {
	Ctx          context.Context
	StartTimeout time.Duration
	Children     []actors.Spec
	// Err, when set, is why the start cannot begin (children that could not
	// be named): the manager fails with it.
	Err error
}

// ShutdownManager shuts the manager down: every child's Shutdown(Ctx) in
// parallel, then the lease is given up. Answered once the manager has
// stopped; a manager already stopped answers at once.
type ShutdownManager struct {
	Ctx context.Context
}

// GatherHealth asks the supervisor to query every controller's health into
// Collector: it calls Collector.Expect, then sends the queries. Before the
// manager is starting it expects nothing (health is empty until then).
type GatherHealth struct {
	Collector *actors.HealthCollector
}

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
	// ErrShutdown is wrapped by the error Start returns when the manager was
	// shut down before it had started.
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
