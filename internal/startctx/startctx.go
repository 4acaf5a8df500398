// Package startctx carries a child's incarnation in the context of its
// start call, between the child actor that puts it there and the public
// functions (actors.FailureReporter, actors.LeaseGuard) that read it: one
// context value, so that neither side needs the other's internals.
package startctx

import "context"

// Incarnation is one incarnation of a child, as its start context carries
// it.
type Incarnation interface {
	// Report reports err as a failure of this incarnation; ignored once the
	// incarnation has been stopped or restarted.
	Report(err error)
	// Guarded reports whether the incarnation runs under the lease (a
	// controller or a store).
	Guarded() bool
	// Guard is the incarnation's lease guard: nil while it may write.
	Guard() error
}

type key struct{}

// With returns ctx carrying inc.
func With(ctx context.Context, inc Incarnation) context.Context {
	return context.WithValue(ctx, key{}, inc)
}

// From returns the incarnation ctx carries, if any.
func From(ctx context.Context) (Incarnation, bool) {
	inc, ok := ctx.Value(key{}).(Incarnation)
	return inc, ok
}
