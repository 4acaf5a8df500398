package controllermanager

import "github.com/actorkube/controllermanager/supervisor"

// Status is a snapshot of a manager, as Status returns it: its Phase,
// whether it leads (Leader, Identity, LeaderIdentity), why it stopped
// (Err), every child (Children, in the order added; Child finds one by
// name) and, with sharded leadership, every shard (Shards). Read it to show
// or test where a manager is (a status page, a debug endpoint, an
// assertion). The fields are documented at supervisor.Status (go doc
// supervisor.Status).
type Status = supervisor.Status

// ChildStatus is a snapshot of one child, an entry of Status.Children: its
// Name, Kind, State, Restarts and Failures, its last health (Healthy,
// Message), its LastError and when it entered its State (Since). Find one
// with Status.Child(name). The fields are documented at
// supervisor.ChildStatus (go doc supervisor.ChildStatus).
type ChildStatus = supervisor.ChildStatus

// ChildState is where a child is, ChildStatus.State: one of the constants
// below. Compare it with them to tell a running child from one backing
// off, stopped by StopChild, or being restarted.
type ChildState = supervisor.ChildState

// The states of a child.
const (
	StatePending    = supervisor.StatePending    // added; not started yet
	StateStarting   = supervisor.StateStarting   // its start call (Run, Recover, Start) is running
	StateRunning    = supervisor.StateRunning    // started and supervised
	StateFailed     = supervisor.StateFailed     // its start call failed; being handled
	StateBackingOff = supervisor.StateBackingOff // shut down after a failure, waiting to start again
	StateStopping   = supervisor.StateStopping   // its Shutdown is running
	StateStopped    = supervisor.StateStopped    // shut down (by StopChild, or with the manager)
)

// ShardStatus is the state of one shard, with sharded leadership, an entry
// of Status.Shards: its Index, Lease, Holder as last observed, whether this
// replica holds it (Held), and the controllers pinned to it (Children).
// Read it to see which replica runs which shard's controllers. The fields
// are documented at supervisor.ShardStatus.
type ShardStatus = supervisor.ShardStatus
