package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Status is a snapshot of a manager, as Status returns it: its Phase,
// whether it leads (Leader, Identity, LeaderIdentity), why it stopped
// (Err), every child (Children, in the order added; Child finds one by
// name) and, with sharded leadership, every shard (Shards). The fields
// are documented at supervisor.Status (go doc supervisor.Status).
type Status = supervisor.Status

// ChildStatus is a snapshot of one child, an entry of Status.Children: its
// Name, Kind, State, Restarts and Failures, its last health (Healthy,
// Message), its LastError and when it entered its State (Since). The
// fields are documented at supervisor.ChildStatus (go doc
// supervisor.ChildStatus).
type ChildStatus = supervisor.ChildStatus

// ChildState is where a child is, ChildStatus.State: one of the constants
// below, documented at supervisor.ChildState.
type ChildState = supervisor.ChildState

// The states of a child.
const (
	StatePending    = supervisor.StatePending
	StateStarting   = supervisor.StateStarting
	StateRunning    = supervisor.StateRunning
	StateFailed     = supervisor.StateFailed
	StateBackingOff = supervisor.StateBackingOff
	StateStopping   = supervisor.StateStopping
	StateStopped    = supervisor.StateStopped
)

// ShardStatus is the state of one shard, with sharded leadership, an entry
// of Status.Shards: its Index, Lease, Holder as last observed, whether this
// replica holds it (Held), and the controllers pinned to it (Children).
// The fields are documented at supervisor.ShardStatus.
type ShardStatus = supervisor.ShardStatus
