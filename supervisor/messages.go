package supervisor

import (
	"context"
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
	// Parent is the path of the group to add the child to; empty: the root.
	// The child's own path is then Parent + "/" + its name.
	Parent string
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

// Messages between a manager's facade and its root supervisor.

// ShutdownManager shuts the manager down, as ShutdownAndWait does: every
// child's Shutdown(Ctx) in parallel, then the lease is given up. Answered
// once the manager has stopped; a manager already stopped answers at once.
type ShutdownManager struct {
	Ctx context.Context
}
