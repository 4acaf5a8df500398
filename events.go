package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Event is one step of the supervision tree, as Subscribe delivers it: its
// Type, Time, the Child and its Kind, the manager's Phase, the child's
// Restarts, the Shard and the Err where there is one. The fields are
// documented at supervisor.Event (go doc supervisor.Event).
type Event = supervisor.Event

// EventType says what an Event reports, one of the constants below; when
// each is published is documented at supervisor.EventType's constants.
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
	ShardAcquired  = supervisor.ShardAcquired
	ShardReleased  = supervisor.ShardReleased
	ShardLost      = supervisor.ShardLost
	EventsDropped  = supervisor.EventsDropped
)
