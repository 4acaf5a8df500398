package supervisor

import (
	"fmt"
	"time"
)

// EventType says what an Event reports.
type EventType string

// The event types. Each is published by the root supervisor, in the order
// the steps happen.
const (
	// PhaseChanged: the manager entered Event.Phase.
	PhaseChanged EventType = "PhaseChanged"
	// ChildStarted: a child's start call returned nil (or, for a plain
	// runnable, the manager started).
	ChildStarted EventType = "ChildStarted"
	// ChildFailed: a child failed; Err says how. Published exactly once per
	// failure, before the strategy acts on it.
	ChildFailed EventType = "ChildFailed"
	// ChildRestarted: a child's start call runs again after a failure or a
	// RestartChild; Restarts counts it.
	ChildRestarted EventType = "ChildRestarted"
	// ChildStopped: a child's Shutdown returned (Err is set when it panicked).
	ChildStopped EventType = "ChildStopped"
	// ChildUnhealthy: a health probe found a child unhealthy or silent; Err
	// carries the message.
	ChildUnhealthy EventType = "ChildUnhealthy"
	// ChildRemoved: a child was shut down and removed (RemoveChild).
	ChildRemoved EventType = "ChildRemoved"
	// Escalated: a child failed more than its restart budget allows; the
	// manager shuts down. Err is the *EscalationError.
	Escalated EventType = "Escalated"
	// LeaderElected: this replica acquired the lease.
	LeaderElected EventType = "LeaderElected"
	// LeaderLost: this replica, having led, lost the lease; Err wraps
	// lease.ErrLost.
	LeaderLost EventType = "LeaderLost"
	// ShardAcquired: with sharded leadership, this replica acquired the
	// Lease of Event.Shard; the shard's controllers start.
	ShardAcquired EventType = "ShardAcquired"
	// ShardReleased: this replica handed Event.Shard over (a rebalance, or a
	// shutdown), once every controller of the shard had returned from
	// Shutdown.
	ShardReleased EventType = "ShardReleased"
	// ShardLost: this replica lost the Lease of Event.Shard (taken by
	// another replica, or not renewed in time); Err wraps lease.ErrLost. The
	// shard's controllers are fenced.
	ShardLost EventType = "ShardLost"
	// ChildUnstopped: a child's Shutdown had not returned when the context
	// of a shutdown ended (ShutdownAndWait gave up waiting for it). Err is
	// an *UnstoppedError naming it alone, with how long its Shutdown had
	// run and the stack of the goroutine running it. Published by the
	// manager's facade, once per child and per ShutdownAndWait that gave up.
	ChildUnstopped EventType = "ChildUnstopped"
	// ClusterEngaged: a fleet (controllermanager.NewFleet) took on the
	// member cluster Event.Child ("<fleet>/<cluster>"), or took on its
	// changed config; Kind is "cluster". Published by the fleet when its
	// provider engages the cluster, before the cluster is first probed.
	// With Err set, the provider could not engage it (Err says why: a
	// kubeconfig that does not parse, a second Secret for one cluster) and
	// nothing changed: a cluster engaged before stays on its config.
	ClusterEngaged EventType = "ClusterEngaged"
	// ClusterOffline: a member cluster's subtree is not running: its API
	// server failed its probes for the fleet's FailureThreshold (its
	// subtree was stopped), it did not answer when engaged, or it could not
	// be engaged (a config that does not parse, a build that panicked). Err
	// says why. Published by the fleet.
	ClusterOffline EventType = "ClusterOffline"
	// ClusterOnline: a member cluster answered its probes and its subtree
	// runs: when engaged, or after an outage once it answered for the
	// fleet's SuccessThreshold. Published by the fleet.
	ClusterOnline EventType = "ClusterOnline"
	// ClusterDisengaged: a member cluster's provider let it go and its
	// subtree was shut down and removed; or its fleet was removed, and the
	// cluster is no longer at Child: the fleet's removal disengaged it, or
	// the fleet, added again at another path, moved it there (its
	// ClusterEngaged at the new path follows). Published by the fleet.
	ClusterDisengaged EventType = "ClusterDisengaged"
	// EventsDropped: this subscriber fell more than its buffer behind and
	// the oldest events it had not received were dropped; Restarts holds how
	// many. Only this subscriber sees it.
	EventsDropped EventType = "EventsDropped"
)

// Event is one step of the supervision tree.
type Event struct {
	Type     EventType
	Time     time.Time
	Child    string // the child's name; empty for manager-level events
	Kind     string // "controller", "store", "webhook", "runnable", "group", "cluster" (a fleet's member, its group's events too), or empty
	Phase    Phase  // the manager's phase when the event was published (a PhaseChanged that follows says where it went)
	Restarts int    // the child's restarts so far (for EventsDropped: how many events were dropped)
	Shard    int    // for ShardAcquired, ShardReleased and ShardLost: the shard
	Err      error  // the failure, where there is one
}

// String is the event on one line, for logs: its type, phase, child and error.
func (e Event) String() string {
	s := fmt.Sprintf("%s phase=%s", e.Type, e.Phase)
	if e.Child != "" {
		s += fmt.Sprintf(" child=%s kind=%s restarts=%d", e.Child, e.Kind, e.Restarts)
	}
	switch e.Type {
	case ShardAcquired, ShardReleased, ShardLost:
		s += fmt.Sprintf(" shard=%d", e.Shard)
	}
	if e.Err != nil {
		s += fmt.Sprintf(" err=%q", e.Err.Error())
	}
	return s
}
