package controllermanager_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// A controller whose Run ignores its context, then returns nil having
// started a worker: once it has returned, its Shutdown is called (a Run
// that returned nil is matched by a Shutdown).
//   - restart: the Run of a RestartChild blocks past its caller's context
//     and the manager is shut down with a short context: Done waits for
//     the Run.
//   - start: the first Run blocks past Start's startTimeout. A failed Start
//     is a shutdown nobody asked for: the manager ends in Failed after
//     ShutdownTimeout without waiting for the Run (docs/supervision.md).
//     Before, the Shutdown owed to that Run was never called once it
//     returned (its actor was gone): the worker ran on for ever.
func TestAttackRunIgnoresItsContext(t *testing.T) {
	for _, when := range []string{"restart", "start"} {
		t.Run(when, func(t *testing.T) {
			release := make(chan struct{})
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			var returned, workers atomic.Int32
			c := testchild.NewController("c", testchild.Behavior{
				Run: func(ctx context.Context, n int) error {
					if when == "start" || n > 1 {
						<-release
					}
					workers.Add(1)
					returned.Add(1)
					return nil
				},
				Shutdown: func(ctx context.Context, n int) {
					workers.Store(0)
				},
			})
			m := newManager(t, nil, &cm.SupervisionSpec{ShutdownTimeout: gDuration(200 * time.Millisecond)})
			m.Add(c)
			rec := record(m)
			defer func() {
				if t.Failed() {
					for _, e := range rec.snapshot() {
						t.Logf("event %s", e)
					}
				}
			}()
			sctx, scancel := context.WithTimeout(context.Background(), wait)
			defer scancel()
			if when == "start" {
				require.Error(t, m.Start(sctx, 200*time.Millisecond))
			} else {
				require.NoError(t, m.Start(sctx, 200*time.Millisecond))
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				_ = m.RestartChild(rctx, "c")
				rcancel()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			m.ShutdownAndWait(ctx)
			cancel()
			if when == "restart" {
				select {
				case <-m.Done():
					t.Fatalf("Done while a Run has not returned (runs returned %d)", returned.Load())
				default:
				}
			}
			n := returned.Load()
			releaseOnce.Do(func() { close(release) })
			elEventually(t, "the late Run returned", func() bool { return returned.Load() > n })
			select {
			case <-m.Done():
			case <-time.After(wait):
				t.Fatal("not Done once Run returned")
			}
			elEventually(t, "the late Run's worker stopped by a Shutdown", func() bool { return workers.Load() == 0 })
			runs, shutdowns, _ := c.Counts()
			require.Equal(t, runs, shutdowns, "every Run that returned nil is matched by a Shutdown")
		})
	}
}
