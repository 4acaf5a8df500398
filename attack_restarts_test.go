package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// Restarts == runs-1 for a controller that keeps failing (a panic, an
// error, a reported failure) when the manager's shutdown, a RestartChild,
// or a StopChild meets it at the nth failure; no Run after Stop/Shutdown.
func TestAttackRestartsMatchRunsAcrossAShutdown(t *testing.T) {
	kinds := []string{"panic", "error", "report"}
	meets := []string{"shutdown", "restart+shutdown", "stop"}
	for _, kind := range kinds {
		for _, meet := range meets {
			for _, at := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/%d", kind, meet, at), func(t *testing.T) {
					sup := &cm.SupervisionSpec{MaxRestarts: 1000, InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(2 * time.Millisecond)}
					m := newManager(t, nil, sup)
					c := testchild.NewController("c", testchild.Behavior{Run: func(ctx context.Context, n int) error {
						if n == 1 { // the start succeeds; its work fails
							go cm.ReportFailure(ctx, errors.New("bg"))
							return nil
						}
						switch kind {
						case "panic":
							panic(fmt.Sprintf("run %d", n))
						case "error":
							return fmt.Errorf("run %d", n)
						}
						go cm.ReportFailure(ctx, errors.New("bg")) // reported from its work
						return nil
					}})
					m.Add(c)
					var once sync.Once
					fired := make(chan struct{})
					failures := 0
					var mu sync.Mutex
					m.Subscribe(func(e cm.Event) {
						if e.Type != cm.ChildFailed || e.Child != "c" {
							return
						}
						mu.Lock()
						failures++
						n := failures
						mu.Unlock()
						if n == at {
							once.Do(func() { close(fired) })
						}
					})
					ctx, cancel := context.WithTimeout(context.Background(), wait)
					defer cancel()
					err := m.Start(ctx, 0)
					_ = err // a start may fail (the first Run's error)
					select {
					case <-fired:
					case <-ctx.Done():
						t.Fatal("no failure")
					}
					var wg sync.WaitGroup
					switch meet {
					case "shutdown":
					case "restart+shutdown":
						wg.Add(1)
						go func() { defer wg.Done(); _ = m.RestartChild(ctx, "c") }()
					case "stop":
						require.NoError(t, ignoreBusy(m.StopChild(ctx, "c")))
						runs, _, _ := c.Counts()
						st, err := m.Status(ctx)
						require.NoError(t, err)
						cs, _ := st.Child("c")
						require.Equal(t, runs-1, cs.Restarts, "after StopChild: runs %d, status %+v", runs, cs)
						// nothing runs it again
						for i := 0; i < 20; i++ {
							st, err = m.Status(ctx)
							require.NoError(t, err)
						}
						runs2, _, _ := c.Counts()
						require.Equal(t, runs, runs2, "ran after StopChild")
					}
					m.ShutdownAndWait(ctx)
					wg.Wait()
					require.NoError(t, ctx.Err())
					<-m.Done()
					runs, shutdowns, _ := c.Counts()
					st, err := m.Status(context.Background())
					require.NoError(t, err)
					cs, ok := st.Child("c")
					require.True(t, ok)
					require.Equal(t, runs-1, cs.Restarts, "runs %d shutdowns %d status %+v", runs, shutdowns, cs)
				})
			}
		}
	}
}

func ignoreBusy(err error) error {
	if err != nil && (errors.Is(err, cm.ErrBusy) || errors.Is(err, cm.ErrNotRunning)) {
		return nil
	}
	return err
}
