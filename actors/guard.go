package actors

import (
	"context"

	"github.com/actorkube/controllermanager/internal/startctx"

	"github.com/actorkube/controllermanager/lease"
)

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
	if inc, ok := startctx.From(ctx); ok && inc.Guarded() {
		return inc.Guard, true
	}
	return noGuard, false
}

func noGuard() error {
	return &lease.NotHeldError{Reason: "the context carries no lease guard (not a start context of a controller or store)"}
}
