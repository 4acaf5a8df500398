package childactor

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/startctx"
	"github.com/actorkube/controllermanager/lease"
)

// incarnation is what the context passed to a start call carries, in one
// value of 32 bytes (one allocation and one context layer per start, on
// every child): the failure reporter of the incarnation started with it
// (FailureReporter) and, for the kinds that run under the lease, its lease
// guard (LeaseGuard): check while the incarnation lives, failing for ever
// once its Shutdown has returned. It reads only the child's fields that
// never change once the actor has started (spec, system, self).
type incarnation struct {
	c     *child
	gen   uint64
	check func() error // nil: nothing but the incarnation's life to check
	ended atomic.Bool
}

// newIncarnation returns incarnation gen of c, starting now; guards gives
// the check of its lease guard (nil: election off).
func newIncarnation(c *child, gen uint64, guards Guards) *incarnation {
	inc := &incarnation{c: c, gen: gen}
	if inc.Guarded() && guards != nil {
		inc.check = guards(*c.spec)
	}
	return inc
}

// Guarded reports whether the incarnation runs under the lease: a
// controller or a store, whose context has a lease guard.
func (inc *incarnation) Guarded() bool {
	return inc.c.spec.Kind == actors.KindController || inc.c.spec.Kind == actors.KindStore
}

// Report reports err as a failure of this incarnation to its child, which
// ignores it once the incarnation has been stopped or restarted.
func (inc *incarnation) Report(err error) {
	inc.c.system.Root.Send(inc.c.self, reported{gen: inc.gen, err: err})
}

// Guard is the incarnation's lease guard.
func (inc *incarnation) Guard() error {
	if inc.ended.Load() {
		return &lease.NotHeldError{Reason: fmt.Sprintf("%s %q: this incarnation has been shut down", inc.c.spec.Kind, inc.c.spec.Name)}
	}
	if inc.check == nil {
		return nil
	}
	return inc.check()
}

// end makes the guard fail from now on; nil is fine.
func (inc *incarnation) end() {
	if inc != nil {
		inc.ended.Store(true)
	}
}

// with returns ctx carrying inc, reachable by FailureReporter and LeaseGuard.
func (inc *incarnation) with(ctx context.Context) context.Context {
	return startctx.With(ctx, inc)
}
