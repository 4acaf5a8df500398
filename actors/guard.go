package actors

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/actorkube/controllermanager/lease"
)

// Guards gives the children that run under a lease (controllers and stores)
// the check their lease guard delegates to: called once per incarnation, as
// it starts, with the child's spec, so that each child can be given the
// lease it runs under (today the one lease; with shards, its shard's). A nil
// Guards (election off) gives a guard that passes until the incarnation's
// Shutdown has returned.
type Guards func(spec Spec) (check func() error)

type guardKey struct{}

// incarnationGuard is the lease guard of one incarnation: check while the
// incarnation lives, failing for ever once its Shutdown has returned.
type incarnationGuard struct {
	spec  Spec
	check func() error // nil: nothing but the incarnation's life to check
	ended atomic.Bool
}

func (g *incarnationGuard) guard() error {
	if g.ended.Load() {
		return &lease.NotHeldError{Reason: fmt.Sprintf("%s %q: this incarnation has been shut down", g.spec.Kind, g.spec.Name)}
	}
	if g.check == nil {
		return nil
	}
	return g.check()
}

// newIncarnationGuard returns the guard of the incarnation of spec starting
// now, or nil for a kind that does not run under the lease (webhooks and
// plain runnables).
func newIncarnationGuard(spec Spec, guards Guards) *incarnationGuard {
	if spec.Kind != KindController && spec.Kind != KindStore {
		return nil
	}
	g := &incarnationGuard{spec: spec}
	if guards != nil {
		g.check = guards(spec)
	}
	return g
}

// end makes the guard fail from now on; nil is fine.
func (g *incarnationGuard) end() {
	if g != nil {
		g.ended.Store(true)
	}
}

// withGuard returns ctx carrying g's guard, reachable by LeaseGuard.
func withGuard(ctx context.Context, g *incarnationGuard) context.Context {
	if g == nil {
		return ctx
	}
	return context.WithValue(ctx, guardKey{}, g)
}

// LeaseGuard returns the lease guard of the child whose start context ctx
// is (or derives from): guard returns nil while this replica can prove it
// holds the lease the child runs under, else an error wrapping
// lease.ErrNotHeld with the figures. It reads an atomic and the clock: no
// lock, no allocation when it passes, no API call. It keeps working after
// the start call has returned, for the incarnation's lifetime, and fails for
// ever once the incarnation's Shutdown has returned (it still passes during
// Shutdown while the lease is held). With election off it passes until then.
//
// ok is false when ctx was not passed by a manager to a controller's Run or a
// store's Recover; guard then always fails, so that a write guarded by it is
// refused rather than let through unchecked.
func LeaseGuard(ctx context.Context) (guard func() error, ok bool) {
	if g, ok := ctx.Value(guardKey{}).(*incarnationGuard); ok {
		return g.guard, true
	}
	return noGuard, false
}

func noGuard() error {
	return &lease.NotHeldError{Reason: "the context carries no lease guard (not a start context of a controller or store)"}
}
