package controllermanager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// With Reelect, a child whose start call fails in the start round after a
// re-election is a failure of that child, supervised as at any other time
// (restarted after its backoff, Restarts = runs-1), not the end of the
// manager: a lease lost in an API server's trouble is when a controller's
// Run is likeliest to fail. Before, the round failed the manager ("cannot
// start controllers"), while the same failure in a shard acquired while
// Running was restarted. A group's controllers still start after its
// stores: one whose Recover failed in the round is restarted first. The
// start timeout ends a slow start call of such a round as it ends a
// restart's: the call fails, and is supervised.
func TestElectionReelectRoundSupervisesAFailedStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store bool // the group's store's Recover fails, not the controller's Run
		// slow: the Run waits for its context, which the start timeout
		// ends (a Run waiting for a cache that an API server in trouble
		// does not fill).
		slow bool
	}{
		{name: "controller's Run"},
		{name: "group store's Recover", store: true},
		{name: "controller's Run past the start timeout", slow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := &seamLog{} // the order the children's calls happened in
			srv := leasetest.NewServer()
			sup := &cm.SupervisionSpec{InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(2 * time.Millisecond)}
			m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
				cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostReelect), Supervision: sup}, "", cm.WithIdentity("a"), elQuiet)
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), elWait)
				defer cancel()
				m.ShutdownAndWait(ctx)
			})
			c := testchild.NewController("c", testchild.Behavior{Run: func(ctx context.Context, n int) error {
				if tc.slow && n == 2 {
					<-ctx.Done()
					j.add("c run %d failed", n)
					return ctx.Err()
				}
				if !tc.store && n == 2 {
					j.add("c run %d failed", n)
					return errors.New("informer did not sync")
				}
				j.add("c run %d", n)
				return nil
			}})
			s := testchild.NewStore("s", func(_ context.Context, n int) error {
				if tc.store && n == 2 {
					j.add("s recover %d failed", n)
					return errors.New("list failed")
				}
				j.add("s recover %d", n)
				return nil
			})
			m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, cm.StoreChild(s), c))
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			require.NoError(t, m.Start(ctx, time.Second))

			// The Lease is stolen for a moment: a fences everything, and
			// campaigns again once the thief's Lease has expired.
			require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", 300*time.Millisecond))
			elEventually(t, "the round after the re-election has run its failure and its restart", func() bool {
				if tc.store {
					return j.index("c run 2") >= 0
				}
				return j.index("c run 3") >= 0
			})
			elEventually(t, "Running, leader", func() bool {
				st := mustStatus(t, m)
				cs, _ := st.Child("g/c")
				return st.Phase == cm.PhaseRunning && st.Leader && cs.State == cm.StateRunning
			})
			select {
			case <-m.Done():
				t.Fatalf("the manager stopped: %v", m.Err())
			default:
			}
			st := mustStatus(t, m)
			runs, _, _ := c.Counts()
			recovers, _ := s.Counts()
			cs, _ := st.Child("g/c")
			ss, _ := st.Child("g/s")
			require.Equal(t, runs-1, cs.Restarts, "g/c: Restarts = runs-1 (%+v)", cs)
			require.Equal(t, recovers-1, ss.Restarts, "g/s: Restarts = runs-1 (%+v)", ss)
			require.Equal(t, 1, cs.Failures+ss.Failures, "one failure: %+v %+v", cs, ss)
			if tc.store {
				// Stores first: c runs again only after s has recovered.
				require.Less(t, j.index("s recover 3"), j.index("c run 2"), "%v", j.snapshot())
				require.Equal(t, 3, recovers, "%v", j.snapshot())
				require.Equal(t, 2, runs, "%v", j.snapshot())
			} else {
				require.Equal(t, 3, runs, "%v", j.snapshot())
			}
		})
	}
}
