package journal

// The kinds and values of the replica program's groups mode (--groups), where each
// tenant is a supervision tree's group of its own.
const (
	// GroupState: the replica's Status shows a group (Child, its path) in a new state
	// (Type: "Running", "Stopped", ...), with Restarts the most restarts any of its
	// children has spent of its budget (GroupStatus.Spent), Message GroupExhausted
	// when it stopped because that budget was spent, and Err its last failure.
	GroupState Kind = "group-state"
	// GroupStopRequested: the replica stopped a group (Child) by request, StopChild,
	// which returned (Err when it failed).
	GroupStopRequested Kind = "group-stop-requested"
	// MetricsServing: the replica serves its manager's metrics on http://Addr/metrics.
	MetricsServing Kind = "metrics-serving"
)

// GroupExhausted is the Message of a GroupState entry for a group stopped because a
// child spent its budget (ExhaustedStop), not by request.
const GroupExhausted = "exhausted"
