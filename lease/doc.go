// Package lease runs leader election for a manager as an actor: the elector
// actor wraps k8s.io/client-go/tools/leaderelection over a
// resourcelock.Interface (a coordination.k8s.io/v1 LeaseLock by default) and
// tells its parent, the root supervisor, what happens as messages: Elected,
// NewLeader, Lost and, once it has given the lease up on request, Released.
//
// The elector never decides what runs: the supervisor does. It starts no
// controller before Elected and, on Resign, the elector gives the lease up
// (client-go's ReleaseOnCancel) only when the supervisor asks, which it does
// after every runnable has returned from Shutdown.
package lease
