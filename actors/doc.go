// Package actors is what a component the manager hosts implements and
// calls: the interfaces of a controller, a store, a webhook and a plain
// runnable (Controller, Store, Webhook, Runnable, Namer), the health it
// reports (HealthStatus), the functions it calls from the context of its
// start call (FailureReporter, ReportFailure, LeaseGuard), and the errors a
// failed user call becomes (PanicError, CallError) or is matched with.
//
// Each component runs in an actor of its own on protoactor-go. A child actor
// never runs user code inside Receive: every user call (Run, Recover, Start,
// Shutdown, GetHealth, Ready, Handle) runs in a goroutine the actor starts
// for it, under its own recover, and its result comes back to the actor as a
// message. A user call that hangs never stops the actor from answering a
// health query or a stop, and a panic in user code becomes a *PanicError that
// names the child and carries the stack; it never crashes the process.
//
// The root package re-exports these names under its own (Controller, Store,
// Webhook, Runnable, HealthStatus, PanicError, FailureReporter,
// ReportFailure, LeaseGuard). The child actor itself and its protocol with
// the root supervisor live in internal/childactor.
package actors
