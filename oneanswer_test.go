package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// One shutdown, one answer (issue 34 §2): Err is an *UnstoppedError
// exactly when ShutdownAndWait's context ended before the last Shutdown
// returned, on every run, however the child's return and the deadline are
// scheduled. Before the fix a Shutdown that honours its context (returns
// as the context ends) left Err nil in about half the runs: the report saw
// the call returned, or the manager stopped, and called it on time.
// Run it at -count=50 beside CPU-bound loops.
func TestErrOneAnswerPerShutdown(t *testing.T) {
	cases := []struct {
		name      string
		shutdown  func(ctx context.Context, release <-chan struct{}, cancel context.CancelFunc)
		deadline  time.Duration // 0: no deadline; ctx ends by cancel
		inGroup   bool          // the child is "g/slow", in group g
		unstopped bool
	}{
		{
			// Returns the moment its context ends: after the deadline.
			name:      "honours its context",
			shutdown:  func(ctx context.Context, _ <-chan struct{}, _ context.CancelFunc) { <-ctx.Done() },
			deadline:  50 * time.Millisecond,
			unstopped: true,
		},
		{
			// Ends the context itself, then returns: the tightest race
			// between a return and the context's end.
			name: "returns right after its context ends",
			shutdown: func(_ context.Context, _ <-chan struct{}, cancel context.CancelFunc) {
				cancel()
			},
			unstopped: true,
		},
		{
			name:      "honours its context, in a group",
			shutdown:  func(ctx context.Context, _ <-chan struct{}, _ context.CancelFunc) { <-ctx.Done() },
			deadline:  50 * time.Millisecond,
			inGroup:   true,
			unstopped: true,
		},
		{
			// Ignores its context: returns once the test lets it, after
			// ShutdownAndWait has returned.
			name:      "ignores its context",
			shutdown:  func(_ context.Context, release <-chan struct{}, _ context.CancelFunc) { <-release },
			deadline:  50 * time.Millisecond,
			unstopped: true,
		},
		{
			// Returns at once, within a context that ends only when the
			// test ends it, after ShutdownAndWait has returned.
			name:     "returns within its context",
			shutdown: func(context.Context, <-chan struct{}, context.CancelFunc) {},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			m := newManager(t, nil, nil)
			slow := testchild.NewController("slow", testchild.Behavior{Shutdown: func(sctx context.Context, _ int) {
				tc.shutdown(sctx, release, cancel)
			}})
			want := "slow"
			if tc.inGroup {
				m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, slow))
				want = "g/slow"
			} else {
				m.Add(slow)
			}
			require.NoError(t, m.Start(context.Background(), 0))

			m.ShutdownAndWait(ctx)
			have := m.Err()
			close(release)
			select {
			case <-m.Done():
			case <-time.After(wait):
				t.Fatal("the manager did not stop once its Shutdown returned")
			}
			if !tc.unstopped {
				assert.NoError(t, have, "every Shutdown returned before the context ended")
				assert.NoError(t, m.Err())
				return
			}
			require.ErrorIs(t, have, cm.ErrUnstopped, "the context ended before the Shutdown returned")
			var uerr *cm.UnstoppedError
			require.ErrorAs(t, have, &uerr)
			require.Len(t, uerr.Children, 1)
			assert.Equal(t, want, uerr.Children[0].Name)
			assert.ErrorIs(t, m.Err(), cm.ErrUnstopped, "the same answer once the manager has stopped")
		})
	}
}
