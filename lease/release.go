package lease

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// release gives the lease up if it still names this replica: it writes the
// record client-go's ReleaseOnCancel writes (no holder, a one-second
// duration), so that a standby acquires it at its next retry instead of
// waiting for it to expire. It reads the lease first and writes with the
// resourceVersion it read, so it never clears a lease another replica has
// taken meanwhile; a conflict is retried until ctx ends.
func release(ctx context.Context, lock resourcelock.Interface) error {
	for {
		rec, _, err := lock.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("lease: cannot release %s: %w", lock.Describe(), err)
		case rec.HolderIdentity != lock.Identity():
			return nil // taken over meanwhile: not ours to release
		}
		now := metav1.NewTime(time.Now())
		err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions:    rec.LeaderTransitions,
			LeaseDurationSeconds: 1,
			RenewTime:            now,
			AcquireTime:          now,
		})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || ctx.Err() != nil {
			return fmt.Errorf("lease: cannot release %s: %w", lock.Describe(), err)
		}
	}
}
