package controllermanager_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// fleetReplica is one replica of a sharded fleet: its manager and what its
// build made.
type fleetReplica struct {
	id     string
	mgr    *cm.ControllerManager
	builds *builds
	down   bool
}

// running reports whether cluster's controller runs on r now: started
// more often than it was shut down.
func (r *fleetReplica) running(cluster string) bool {
	for _, c := range r.builds.of(cluster) {
		if c.runs.Load() > c.stops.Load() {
			return true
		}
	}
	return false
}

// write creates a ConfigMap through the Cluster's Client (its Config's
// guarded transport) as r's build gave it: nil when the guard let it pass.
func (r *fleetReplica) write(cluster string) error {
	ctrls := r.builds.of(cluster)
	if len(ctrls) == 0 {
		return fmt.Errorf("%s: cluster %q not built", r.id, cluster)
	}
	c := ctrls[len(ctrls)-1].cluster
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	_, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	return err
}

// spreadOK says why the clusters are not spread as sharding wants, or "":
// each cluster's controller runs on exactly one live replica, the one that
// holds its shard, and only there do its Config's writes pass.
func spreadOK(reps []*fleetReplica, clusters []string, shards int) string {
	for _, c := range clusters {
		shard := cm.ShardOf(c, shards)
		var on []string
		for _, r := range reps {
			if r.down {
				continue
			}
			if r.running(c) {
				on = append(on, r.id)
				if r.mgr.ShardLeaseGuard(shard) != nil {
					return fmt.Sprintf("cluster %q runs on %s, which does not hold shard %d", c, r.id, shard)
				}
			}
		}
		if len(on) != 1 {
			return fmt.Sprintf("cluster %q (shard %d) runs on %v", c, shard, on)
		}
	}
	return ""
}

// Under sharded leadership a fleet's clusters are spread over the
// replicas: each cluster's subtree runs only on the holder of shard
// ShardOf(cluster, S), its Config's writes pass there and are refused
// elsewhere, and a replica's shutdown moves its clusters to the others.
func TestFleetShardedOverReplicas(t *testing.T) {
	const shards = 3
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	clusters := make([]string, 8)
	cfgs := map[string]*rest.Config{}
	for i := range clusters {
		clusters[i] = fmt.Sprintf("cluster-%d", i)
		cfgs[clusters[i]] = newFakeMember(t, memberOK).config()
	}
	var reps []*fleetReplica
	for _, id := range []string{"a", "b"} {
		m, err := cm.NewControllerManager(cm.NewContext(srv.Client(id)),
			cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity(id), elQuiet)
		require.NoError(t, err)
		r := &fleetReplica{id: id, mgr: m, builds: newBuilds()}
		m.Add(cm.NewFleet("fleet", newHandProvider(cfgs), r.builds.build, fleetSpec()))
		reps = append(reps, r)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			m.ShutdownAndWait(ctx)
		})
	}
	for _, r := range reps {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		require.NoError(t, r.mgr.Start(ctx, 0), r.id)
		cancel()
	}

	// Both replicas hold shards (the elector balances them), and every
	// cluster runs on its shard's holder alone.
	pollUntil(t, 3*elWait, func() string {
		held := map[string]int{}
		for _, r := range reps {
			for i := range shards {
				if r.mgr.ShardLeaseGuard(i) == nil {
					held[r.id]++
				}
			}
		}
		if held["a"] == 0 || held["b"] == 0 {
			return fmt.Sprintf("shards held: %v", held)
		}
		return spreadOK(reps, clusters, shards)
	})

	// A cluster's writes pass on the holder of its shard and are refused
	// on the other replica.
	for _, c := range clusters {
		shard := cm.ShardOf(c, shards)
		for _, r := range reps {
			err := r.write(c)
			if r.mgr.ShardLeaseGuard(shard) == nil {
				require.NoError(t, err, "%s writing to %s", r.id, c)
			} else {
				require.Error(t, err, "%s writing to %s (shard %d, not held)", r.id, c, shard)
			}
		}
	}

	// Replica a shuts down: its shards, and with them its clusters, move
	// to b.
	var onA []string
	for _, c := range clusters {
		if reps[0].running(c) {
			onA = append(onA, c)
		}
	}
	require.NotEmpty(t, onA, "no cluster ran on a")
	require.Less(t, len(onA), len(clusters), "every cluster ran on a")
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	reps[0].mgr.ShutdownAndWait(ctx)
	cancel()
	reps[0].down = true
	pollUntil(t, 3*elWait, func() string { return spreadOK(reps, clusters, shards) })
	for _, c := range clusters {
		require.False(t, reps[0].running(c), c)
		require.NoError(t, reps[1].write(c), c)
	}
}

// pollUntil polls cond every few milliseconds until it returns "", and
// fails with its last answer once within has passed.
func pollUntil(t *testing.T, within time.Duration, cond func() string) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		why := cond()
		if why == "" {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("not within %v: %s", within, why)
		case <-tick.C:
		}
	}
}
