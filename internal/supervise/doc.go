// Package supervise is the root supervisor actor of a manager: it drives
// the phases, supervises the children, fences what a lease guards, and
// answers the lifecycle messages of package supervisor. The root package's
// managers (the facade) spawn it (Spawn), talk to it with Ask, and read what
// it publishes (Observed, Bus); package webhook routes admission requests
// through its WebhookTable. Users never import it: its vocabulary (Status,
// Event, Phase, the lifecycle messages and the errors) is package
// supervisor's, and the defaults its Config fills live in internal/defaults
// (docs/defaults.md).
//
// # Messages
//
// Everything the supervisor does happens in its Receive, one message at a
// time; it never blocks there. User calls run in the child actors' goroutines
// (internal/childactor); timers and waits run in goroutines that only send a
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
// (restart.go), a fencing after a lost lease or shard, which with Reelect
// stands the replica down to Electing (fence.go), a shard's hand-over (release.go)
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
package supervise
