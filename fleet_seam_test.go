package controllermanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// An outage during a shard move: a member's API server starts failing at
// the moment the replica running it shuts down. The other replica takes
// the shard and, whatever its own verdict on the member was, ends with it
// Offline and stopped within FailureThreshold plus two probe periods of the
// failure; answering again, it runs there once. No member ever runs on two
// replicas at once, and the other members move and run on.
func TestFleetOutageDuringAShardMove(t *testing.T) {
	const shards = 2
	act := &activity{active: map[string]int{}}
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	clusters := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	members := map[string]*fakeMember{}
	cfgs := map[string]*rest.Config{}
	for _, c := range clusters {
		members[c] = newFakeMember(t, memberOK)
		cfgs[c] = members[c].config()
	}
	var reps []*fleetReplica
	for _, id := range []string{"a", "b"} {
		r := newFleetReplica(t, srv.Client(id), spec, id, cfgs, act)
		reps = append(reps, r)
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		require.NoError(t, r.mgr.Start(ctx, 0), id)
		cancel()
	}
	pollUntil(t, 3*elWait, func() string {
		for _, r := range reps {
			held := 0
			for i := range shards {
				if r.mgr.ShardLeaseGuard(i) == nil {
					held++
				}
			}
			if held == 0 {
				return r.id + " holds no shard"
			}
		}
		return spreadOK(reps, clusters, shards)
	})

	// The victim: a member running on the replica about to go.
	var victim string
	var from, to *fleetReplica
	for _, c := range clusters {
		if reps[0].running(c) {
			victim, from, to = c, reps[0], reps[1]
			break
		}
	}
	require.NotEmpty(t, victim, "no member runs on a")
	// b adds a member's group once its first probe has answered: wait for
	// it, or an outage that comes first leaves b no group to show (the
	// seam under test is a group that is there, stopped, when its shard
	// moves). Under load b's first probe can come after a's start.
	pollUntil(t, 3*elWait, func() string {
		if _, ok := findCluster(to, victim); !ok {
			return fmt.Sprintf("%s not yet engaged on %s", victim, to.id)
		}
		return ""
	})
	log := subscribe(t, to.mgr)
	failedAt := time.Now()
	members[victim].set(memberFailing)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	from.mgr.ShutdownAndWait(ctx)
	cancel()
	from.down = true

	// The others move to b and run there; the victim ends stopped on b.
	var others []string
	for _, c := range clusters {
		if c != victim {
			others = append(others, c)
		}
	}
	pollUntil(t, 3*elWait, func() string { return spreadOK(reps, others, shards) })
	pollUntil(t, 3*elWait, func() string {
		st, ok := findCluster(to, victim)
		switch {
		case !ok:
			return fmt.Sprintf("%s not engaged on %s", victim, to.id)
		case st.State != cm.ClusterStateOffline:
			return fmt.Sprintf("%s is %s on %s", victim, st.State, to.id)
		case to.running(victim):
			return fmt.Sprintf("%s Offline but running on %s", victim, to.id)
		}
		return ""
	})
	// The event reaches the subscriber after Status shows the state: wait
	// for it (it failed CI once, found at once after the Status poll).
	off := log.waitFor(t, nil, 0, is(cm.ClusterOffline, "fleet/"+victim))
	offline := off.Time.Sub(failedAt)
	t.Logf("%s Offline on %s %v after it failed (FailureThreshold %v, probe period %v)", victim, to.id, offline, fleetFail, fleetPeriod)

	// Answering again, it runs on b, once.
	members[victim].set(memberOK)
	pollUntil(t, 3*elWait, func() string { return spreadOK(reps, clusters, shards) })
	require.Empty(t, act.overlaps())
}

func findCluster(r *fleetReplica, name string) (cm.ClusterStatus, bool) {
	st, err := r.mgr.Status(context.Background())
	if err != nil {
		return cm.ClusterStatus{}, false
	}
	cs, ok := st.Child("fleet/" + name)
	if !ok || cs.Cluster == nil {
		return cm.ClusterStatus{}, false
	}
	return cm.ClusterStatus{Name: name, State: cm.ClusterState(cs.Cluster.State)}, true
}
