// Package statespace is the state-space test of a manager's fencing and
// supervision at its phase boundaries: random, seeded, replayable sequences
// of steps over the manager's phases, lifecycle messages, lease events and
// child behaviour, with every invariant checked after every step from the
// children's own journals and the fake API server's lease history.
//
// A Scenario is a manager's make-up (strategy, election off, Exit or
// Reelect, its stores, controllers and webhooks, flat or in a supervision
// tree of Groups) and its Steps; Generate makes one from a seed, and tests
// write minimal ones by hand. Nearly half the seeds make trees: groups
// nested 1 to 3 deep, each with its own (or an inherited) strategy,
// budget and OnExhausted, holding stores, controllers and webhooks known
// by their paths ("g1/g2/ctrl-0"), with lifecycle steps aimed at groups
// and crash loops that spend a group's budget. The tree is drawn last, so
// a flat seed's sequence is what it was before trees. Run drives a
// fresh manager through it: each child journals its start call (Run,
// Recover, Start) and Shutdown, entry and exit, with its incarnation number,
// in one order shared by the whole sequence; leasetest's History says who
// held the lease when. After every step Run checks:
//
//   - never two incarnations of one child inside their start→Shutdown
//     interval at once, never a Shutdown beside its start call, one Shutdown
//     per start call, none lost (the journal checks each entry as it comes);
//   - a webhook's Handle, called by admission clients sending reviews to
//     the manager's handler all along, begins only while an incarnation
//     serves (its Start returned nil, its Shutdown not begun), and no
//     Shutdown begins beside a Handle call younger than the drain's bound;
//   - never a controller or store active while this replica does not hold
//     the lease (no renewal of its own within the lease duration, or its
//     release since), and no release while any child's call is running;
//   - every failure ends in a new start call of the child, in the manager's
//     end, or in something that takes the child out of supervision, within
//     a bound; a running child made unhealthy is noticed within a bound; no
//     child stays BackingOff, Stopping, Starting or Failed with none of its
//     calls running;
//   - a lease (a shard's) is never lost while this replica could renew it:
//     with no partition, Steal or slow-API step before the loss, and every
//     Lease write answered within the retry period (Scenario.WriteLatency,
//     a slow API server whose calls overlap); another writer's edits of a
//     held Lease (WithLeaseEdits: an annotation, the group label dropped,
//     the Lease deleted) are no such step: the holder keeps its lease, and
//     neither are watches that stop delivering, or lists that go
//     unanswered, for a while (WithStalledWatches): the elector renews and
//     campaigns on its own reads and writes;
//   - every child's Since is when it entered its State (a group's too);
//   - in a tree, every restart has a cause its groups' strategies allow (a
//     failure of it, of a group above it, or of a sibling its level's
//     strategy takes it with; a RestartChild or StartChild of it or above
//     it; a change of leadership): RestForOne restarts the failed child and
//     those after it, never a sibling group's children; a group stopped by
//     ExhaustedStop stays stopped until a StartChild; only the root
//     escalates, naming one of its own children, a group by Kind "group",
//     or a child whose Shutdown hung in a restart outside every
//     ExhaustedStop group (inside one, that group stops instead);
//     fencing, one incarnation at a time and the bounds hold at every
//     depth (the checks above read every child by its path);
//   - an escalation, and a lost lease with Exit, end in Done within a bound;
//     at the end, Done, the final phase, Err and the events agree, and
//     Status, the events, the metrics and the children's own start calls
//     agree on every child's restarts and failures;
//   - with a fleet (WithFleet: member clusters on fake API servers,
//     engaged, rotated, disengaged, taken down and up while the sequence
//     runs, a third of them down again as the fleet starts them back), the members' controllers meet every check above, fenced by
//     their cluster's shard; a member is never built again while its old
//     Cluster runs; nothing of a member starts after its
//     ClusterDisengaged, or while its API server is down after its
//     ClusterOffline (but what a lifecycle request starts); a member
//     whose API server has been down for longer than FailureThreshold, a
//     probe period and its timeout, a StopChild and a backoff (plus the
//     slack), while it was engaged, the manager Running, its shard held
//     and the fleet's runner running all along, has been said
//     ClusterOffline or ClusterDisengaged (offline-late, excused by a
//     process paused for half the slack); the fleet never says a member
//     ClusterOnline while its API server has been down for longer than
//     FailureThreshold, two probe periods and a ProbeTimeout (plus the
//     slack) with all of that holding (online-while-down, excused alike);
//     and once the manager has stopped every Cluster has ended and
//     refuses writes.
//
// Each bound is the manager's own (a backoff, ShutdownTimeout, the fence
// timeout, a probe interval) plus Config.Slack for a loaded machine.
//
// One concern per file: runner.go is Run and the runner's state; build.go
// makes the manager under test and its fake API server; drive.go runs the
// steps; observe.go records the manager's events and the process's pauses;
// check.go checks the invariants after every step, checklease.go those
// read from the lease history; end.go settles, heals and shuts the manager
// down and checks the end; report.go is the Result. scenario.go generates
// the sequences, tree.go their supervision trees, checktree.go checks what
// trees promise; fleet.go the fleet, its provider, member API servers
// and checks; children.go and journal.go are the journalling children,
// invariants.go names what is checked.
package statespace
