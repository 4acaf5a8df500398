// Package supervisor is the vocabulary of a manager's supervision: what
// users send it (the lifecycle messages), read from it (Status, Event,
// Phase, ChildState) and match with errors.Is (the sentinel errors).
//
// The root package re-exports every name here, and its managers' methods
// (RestartChild, StopChild, StartChild, AddChild, RemoveChild, Status,
// Subscribe) are the usual way in. Actor-native callers send the messages
// below to a manager's PID with ctx.Request; every request is answered with
// a Reply.
//
// # Phases
//
// A manager moves through the phases in one direction, but for one way back
// (a lost lease with re-election):
//
//	Idle → Initializing → Electing → Recovering → Starting → Running → ShuttingDown → Stopped
//	                                                                              ↘ Failed
//
// Initializing runs the pre-flight (Context.Start) and starts webhooks;
// Electing waits for the lease; Recovering runs every store's Recover in
// parallel; Starting runs every controller's Run in parallel. Any failure on
// the way, a start deadline or the caller's cancellation ends the start: the
// manager shuts down what it started and ends in Failed. A requested shutdown
// ends in Stopped; an escalation or a lost lease ends in Failed. With
// re-election, a lost lease takes the manager from Recovering, Starting or
// Running back to Electing once every controller and store has stopped, its
// webhooks still serving.
//
// # Supervision
//
// Once Running, a child that fails (a panic or error in one of its user
// calls, a failure reported by its background work, unhealthy or silent
// health probes in a row) is restarted with the Strategy: OneForOne restarts
// the child, AllForOne every controller and webhook, RestForOne the child and
// those added after it. A restart is Shutdown, a backoff, then the start call
// again. A child that fails more than its budget allows escalates: the
// manager shuts everything down, gives the lease up, and fails with an
// *EscalationError naming the child.
//
// # Events
//
// Every step is published as an Event, in order, asynchronously: each
// subscriber has its own queue and goroutine, so a slow or panicking
// subscriber never delays supervision.
//
// The supervisor actor itself, and the protocol between it, the facade and
// the child actors, live in internal packages (internal/supervise,
// internal/childactor); docs/architecture.md describes them.
package supervisor
