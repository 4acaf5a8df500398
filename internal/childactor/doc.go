// Package childactor hosts each managed component (controller, store, webhook or
// plain runnable) in an actor of its own on protoactor-go.
//
// A child actor never runs user code inside Receive. Every user call (Run,
// Recover, Start, Shutdown, GetHealth, Ready, Handle) runs in a goroutine the
// actor starts for it, under its own recover; the result comes back to the
// actor as a message, and the actor reports to its parent, the root
// supervisor. Because the mailbox never blocks, a user call that hangs never
// stops the actor from answering a health query or a stop, and a panic in user
// code becomes a *PanicError that names the child and carries the stack; it
// never crashes the process.
//
// The parent drives a child with Start and Stop messages, each tagged with a
// generation (the child's incarnation). The child answers with Started,
// StartFailed, Stopped and Failed, tagged with the same generation, so the
// parent can tell a report of the current incarnation from a late one.
//
// Health is gathered by sending HealthQuery messages to the children with the
// sweep's HealthCollector. A child runs at most one GetHealth call at a time:
// queries that arrive while one is running wait for its answer, so a hung
// GetHealth costs one goroutine, not one per probe, and the collector's own
// deadline decides when silence counts as unhealthy. The calls of one sweep are
// queued on the collector's run queue and run by a few workers once the
// queries are sent (Dispatch), each answer written into its entry; a watchdog
// replaces the workers when a call holds them, so a hung call never delays
// another child's answer (sweep.go).
//
// The interfaces a hosted component implements (Controller, Store, Webhook,
// Runnable), what it calls from its start context (FailureReporter,
// LeaseGuard) and the errors its calls become (PanicError, CallError) are
// public, in package actors; this package is the actor that hosts it and the
// protocol between that actor and the root supervisor (internal/supervise),
// the facade and package webhook.
package childactor
