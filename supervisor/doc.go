// Package supervisor is the root supervisor actor of a manager: it drives the
// phases, supervises the children, and answers lifecycle messages.
//
// # Phases
//
// A manager moves through the phases in one direction, but for one way back
// (Config.Reelect, below):
//
//	Idle → Initializing → Electing → Recovering → Starting → Running → ShuttingDown → Stopped
//	                                                                              ↘ Failed
//
// Initializing runs the pre-flight (Context.Start) and starts webhooks;
// Electing waits for the lease; Recovering runs every store's Recover in
// parallel; Starting runs every controller's Run in parallel. Any failure on
// the way, a start deadline or the caller's cancellation ends the start: the
// manager shuts down what it started and ends in Failed. A requested shutdown
// ends in Stopped; an escalation or a lost lease ends in Failed.
//
// A lost lease first fences: every controller and store is shut down within
// Config.FenceTimeout, before another replica may take the lease over (one
// still in Shutdown then fails the manager at once). With Config.Reelect the
// manager then goes from Recovering, Starting or Running back to Electing,
// its webhooks still serving, and the next election recovers the stores and
// runs the controllers afresh; a Start still in progress waits for it.
//
// # Supervision
//
// Once Running, a child that fails (a panic or error in one of its user calls,
// a failure reported by its background work, UnhealthyThreshold unhealthy or
// silent health probes in a row) is restarted with the Strategy: OneForOne
// restarts the child, AllForOne every controller and webhook, RestForOne the
// child and those added after it. A restart is Shutdown, a backoff, then the
// start call again. A child that fails more than MaxRestarts times within
// RestartWindow escalates: the manager shuts everything down, gives the lease
// up, and fails with an *EscalationError naming the child.
//
// # Messages
//
// Everything the supervisor does happens in its Receive, one message at a
// time; it never blocks there. User calls run in the child actors' goroutines
// (package actors); timers and waits run in goroutines that only send a
// message back. Callers outside the actor system use Ask; the managers'
// methods are built on it. Lifecycle messages: RestartChild, StopChild,
// StartChild, AddChild, RemoveChild and GetStatus. Every request is answered
// with a Reply.
//
// # Operations in flight
//
// What spans messages is a named state machine, a struct with a stage field
// advanced by one step method whose switch reads its stages in order: the
// start round (start.go), a restart plan and a restart on request
// (restart.go), a fencing after a lost lease or shard (fence.go), the
// stand-down to Electing (standdown.go), a shard's hand-over (release.go)
// and the shutdown (shutdown.go). Children's reports settle a barrier
// (children.go), which tells its owner unless the owner has ended or moved
// on: the one place a stale report is dropped. The phase moves only through
// one function with a table of legal moves (phase.go); a move it does not
// list is a bug and fails the manager. The single lease is shard 0 of the
// shard elector's messages: one handler each for Acquired, HolderChanged,
// Releasing and Lost, whether there is one lease or many.
//
// # Events
//
// Every step is published as an Event to the subscribers of the Bus, in
// order, once the message that made it has been handled, asynchronously: each subscriber has its own queue and goroutine, so
// a slow or panicking subscriber never delays supervision.
//
// # Facade plumbing
//
// Users import this package for the lifecycle messages (RestartChild,
// StopChild, StartChild, AddChild, RemoveChild, GetStatus), their Reply, the
// Status they answer, Event and the sentinel errors. The rest of its
// exported names exist because the root package's managers (the facade) and
// package webhook are built on them, and most of their doc comments start
// "Facade plumbing": Spawn, Handle, Config, Mode, Policy, DefaultPolicy,
// Timing, DefaultTiming, Ask, Specs, Bus, NewBus, Observed, NewObserved,
// ActiveChild, WebhookTable, WebhookRoute, StartManager, ShutdownManager and
// GatherHealth. They may change between releases; a manager's own methods
// are the stable way in. The defaults Config fills live in
// internal/defaults (docs/defaults.md).
package supervisor
