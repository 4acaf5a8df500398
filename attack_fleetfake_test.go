package controllermanager_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
)

// A fleet under sharded leadership whose replicas elect on client-go's
// fake clientset (no resourceVersions: a write is read back before it
// counts, rule 5 of docs/leader-election.md) answering every Lease call at
// once or in 100ms: a join spreads the members, a stalled watch on the
// holder changes nothing, and a leave hands the leaver's members over. A
// member's controller never runs on two replicas at once, and runs only
// where its shard is held.
func TestAttackFleetShardedOnAFakeClientset(t *testing.T) {
	for _, backend := range []string{"NewClientset", "NewClientset-100ms"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const shards = 3
			srv := newFakeServer(backend)
			act := &activity{active: map[string]int{}}
			spec := elSpec(cm.LeaseLostReelect)
			spec.Shards = shards
			spec.LeaseDuration.Duration = fakeLeaseDuration
			clusters, cfgs := fakeClusters(t, 6)
			a := newFleetReplica(t, srv.clientFor("a"), spec, "a", cfgs, act)
			b := newFleetReplica(t, srv.clientFor("b"), spec, "b", cfgs, act)
			start := func(r *fleetReplica) {
				ctx, cancel := context.WithTimeout(context.Background(), fakeSettleWait)
				defer cancel()
				require.NoError(t, r.mgr.Start(ctx, 0), r.id)
			}
			start(a)
			pollUntil(t, fakeSettleWait, func() string { return spreadOK([]*fleetReplica{a}, clusters, shards) })

			// b joins: it takes shards over as a gives them up, and each
			// member runs on the one replica that holds its shard.
			b.down = true
			start(b)
			b.down = false
			reps := []*fleetReplica{a, b}
			pollUntil(t, fakeSettleWait, func() string {
				if why := spreadOK(reps, clusters, shards); why != "" {
					return why
				}
				return holdsNoShard(reps, shards)
			})
			require.Empty(t, act.overlaps())

			// a's watch stops delivering: its safety rests on its reads,
			// so the spread holds.
			srv.stall("a")
			pollUntil(t, fakeSettleWait, func() string { return spreadOK(reps, clusters, shards) })
			require.Empty(t, act.overlaps())

			// b leaves: its members run on a, whose watch is still stalled
			// (it sees the releases by reading).
			ctx, cancel := context.WithTimeout(context.Background(), fakeSettleWait)
			b.mgr.ShutdownAndWait(ctx)
			require.NoError(t, ctx.Err())
			cancel()
			require.NoError(t, b.mgr.Err())
			b.down = true
			pollUntil(t, fakeSettleWait, func() string { return spreadOK(reps, clusters, shards) })
			for _, c := range clusters {
				require.False(t, b.running(c), c)
			}
			require.Empty(t, act.overlaps())
		})
	}
}
