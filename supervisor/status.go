package supervisor

import (
	"strings"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// Status is a snapshot of the manager.
type Status struct {
	Phase          Phase
	Leader         bool   // this replica holds the lease, or with shards at least one shard (always false with election off)
	Identity       string // this replica's lease identity; empty with election off
	LeaderIdentity string // the holder last observed; empty with election off or before one is seen
	Err            error  // why the manager stopped, once it has (nil after a requested shutdown)
	Children       []ChildStatus
	// Shards is the state of every shard, with sharded leadership; empty
	// with the single lease or election off.
	Shards []ShardStatus
}

// ShardStatus is the state of one shard, as this replica sees it.
type ShardStatus struct {
	Index    int
	Lease    string   // the shard's Lease name
	Holder   string   // its holder, as last observed; empty when none
	Held     bool     // this replica holds it now
	Children []string // the controllers pinned to it
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
	// Children are a group's children, in start order (Kind "group");
	// nil for every other kind.
	Children []ChildStatus
	// Group is a group's own supervision (Kind "group" or "cluster"); nil
	// for every other kind.
	Group *GroupStatus
	// Cluster is where a fleet's member cluster stands (Kind "cluster":
	// the group "<fleet>/<cluster>" of controllermanager.NewFleet); nil for
	// every other kind.
	Cluster *ClusterInfo
}

// ClusterInfo is where a fleet's member cluster stands, in the
// ChildStatus of its group (controllermanager.ClusterStatus as text, and
// the shard that runs it).
type ClusterInfo struct {
	// State is Engaging, Online, Offline or Failed
	// (controllermanager.ClusterState). A member whose group was stopped
	// by StopChild is still probed: its ChildStatus.State says Stopped.
	State     string
	Since     time.Time // when it entered State
	LastProbe time.Time // zero before its first probe
	// ProbeError is the last probe's failure; empty when it answered.
	ProbeError string
	// Error says why it is Offline or Failed; empty otherwise.
	Error string
	// Problem is the last problem its provider reported engaging it (a
	// kubeconfig that does not parse); empty when none.
	Problem string
	// Shard is the shard that runs its subtree, with sharded leadership
	// (ShardOf(cluster, Shards)); -1 otherwise.
	Shard int
	// Holder is the identity of the replica holding that shard (or the
	// single lease), as last observed; empty with election off or before
	// one is seen.
	Holder string
}

// GroupStatus is the supervision a group applies to its children, its
// zero fields inherited from its parent's, and how much of its budget
// they have spent.
type GroupStatus struct {
	Strategy      Strategy
	MaxRestarts   int           // restarts allowed within RestartWindow, per child
	RestartWindow time.Duration // the budget's window
	// ShutdownTimeout bounds the Shutdown calls of the group's restarts and
	// of the stops asked of its children (its own, or inherited).
	ShutdownTimeout time.Duration
	// HealthInterval, HealthTimeout and UnhealthyThreshold are how the
	// group's own controllers and webhooks are probed (its own, or
	// inherited).
	HealthInterval, HealthTimeout time.Duration
	UnhealthyThreshold            int
	// StopOnExhausted: once a child spends the budget the group stops
	// (controllermanager.ExhaustedStop) rather than fail to its parent.
	StopOnExhausted bool
	// Exhausted: the group is stopped because a child spent its budget, or
	// because a Shutdown of its restart did not return within
	// ShutdownTimeout (not by StopChild); StartChild starts it again.
	Exhausted bool
	// Spent is the most restarts any one of its children has within the
	// window now: the budget is spent once a failure finds it at
	// MaxRestarts.
	Spent int
}

// Child returns the status of the named child at any depth: name is a
// child's path ("tenant-a/store" for a child of group "tenant-a").
func (s Status) Child(name string) (ChildStatus, bool) {
	return findChild(s.Children, name)
}

func findChild(children []ChildStatus, name string) (ChildStatus, bool) {
	for _, c := range children {
		if c.Name == name {
			return c, true
		}
		if c.Kind.IsGroup() && strings.HasPrefix(name, c.Name+"/") {
			return findChild(c.Children, name)
		}
	}
	return ChildStatus{}, false
}
