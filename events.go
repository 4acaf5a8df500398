package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Event is one step of the supervision tree, as Subscribe delivers it: its
// Type, Time, the Child and its Kind, the manager's Phase, the child's
// Restarts, the Shard and the Err where there is one. Subscribe to follow
// a manager (a log line, a metric, a test that waits for a ChildRestarted)
// and switch on Type; match Err with errors.Is and errors.As. The fields
// are documented at supervisor.Event (go doc supervisor.Event).
type Event = supervisor.Event

// EventType says what an Event reports, one of the constants below, each
// with when it is published; compare Event.Type with them.
type EventType = supervisor.EventType

// The event types, as Event.Type carries them. ChildUnstopped
// (unstopped.go) is one too.
const (
	// PhaseChanged: the manager entered Event.Phase.
	PhaseChanged = supervisor.PhaseChanged
	// ChildStarted: a child's start call returned nil (or, for a plain
	// runnable, the manager started).
	ChildStarted = supervisor.ChildStarted
	// ChildFailed: a child failed; Err says how. Published exactly once per
	// failure, before the strategy acts on it.
	ChildFailed = supervisor.ChildFailed
	// ChildRestarted: a child's start call runs again after a failure or a
	// RestartChild; Restarts counts it.
	ChildRestarted = supervisor.ChildRestarted
	// ChildStopped: a child's Shutdown returned (Err is set when it panicked).
	ChildStopped = supervisor.ChildStopped
	// ChildUnhealthy: a health probe found a child unhealthy or silent; Err
	// carries the message.
	ChildUnhealthy = supervisor.ChildUnhealthy
	// ChildRemoved: a child was shut down and removed (RemoveChild).
	ChildRemoved = supervisor.ChildRemoved
	// Escalated: a child failed more than its restart budget allows; the
	// manager shuts down. Err is the *EscalationError.
	Escalated = supervisor.Escalated
	// LeaderElected: this replica acquired the lease.
	LeaderElected = supervisor.LeaderElected
	// LeaderLost: this replica, having led, lost the lease; Err wraps
	// lease.ErrLost.
	LeaderLost = supervisor.LeaderLost
	// ShardAcquired: with sharded leadership, this replica acquired the
	// Lease of Event.Shard; the shard's controllers start.
	ShardAcquired = supervisor.ShardAcquired
	// ShardReleased: this replica handed Event.Shard over (a rebalance, or a
	// shutdown), once every controller of the shard had returned from
	// Shutdown.
	ShardReleased = supervisor.ShardReleased
	// ShardLost: this replica lost the Lease of Event.Shard (taken by
	// another replica, or not renewed in time); Err wraps lease.ErrLost. The
	// shard's controllers are fenced.
	ShardLost = supervisor.ShardLost
	// EventsDropped: this subscriber fell more than its buffer behind and
	// the oldest events it had not received were dropped; Restarts holds how
	// many. Only this subscriber sees it.
	EventsDropped = supervisor.EventsDropped
)
