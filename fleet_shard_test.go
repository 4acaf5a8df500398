package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
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

// newFleetReplica is replica id of a fleet over the members cfgs, on
// client's API server with spec, its controllers reporting to act; not
// started, shut down at the test's end.
func newFleetReplica(t *testing.T, client kubernetes.Interface, spec *cm.LeaderElectionSpec, id string, cfgs map[string]*rest.Config, act *activity) *fleetReplica {
	t.Helper()
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity(id), elQuiet)
	require.NoError(t, err)
	r := &fleetReplica{id: id, mgr: m, builds: newBuilds()}
	m.Add(cm.NewFleet("fleet", newHandProvider(cfgs), act.build(id, r.builds), fleetSpec()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return r
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

// holdsNoShard names the first of reps that holds no shard of shards, or
// returns "".
func holdsNoShard(reps []*fleetReplica, shards int) string {
	for _, r := range reps {
		held := false
		for i := range shards {
			held = held || r.mgr.ShardLeaseGuard(i) == nil
		}
		if !held {
			return r.id + " holds no shard"
		}
	}
	return ""
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
//
// Throughout, a cluster's controller is never active (from its Run to its
// Shutdown) on two replicas at once.
func TestFleetShardedOverReplicas(t *testing.T) {
	t.Run("2 replicas", func(t *testing.T) { runFleetSharded(t, []string{"a", "b"}, false) })
	t.Run("3 replicas", func(t *testing.T) { runFleetSharded(t, []string{"a", "b", "c"}, false) })
	// a is cut off from the API server instead: it keeps its Leases until
	// they expire, and must have stopped its clusters before they do.
	t.Run("3 replicas, a partitioned", func(t *testing.T) { runFleetSharded(t, []string{"a", "b", "c"}, true) })
}

// activity counts, per cluster, the replicas whose controller for it is
// active, and records any overlap.
type activity struct {
	mu      sync.Mutex
	active  map[string]int
	overlap []string
}

// build wraps b.build: each controller it makes reports to a.
func (a *activity) build(id string, b *builds) func(cm.Cluster) []cm.Runnable {
	return func(c cm.Cluster) []cm.Runnable {
		out := b.build(c)
		for i, r := range out {
			out[i] = &watchedCtrl{clusterCtrl: r.(*clusterCtrl), a: a, id: id, cluster: c.Name()}
		}
		return out
	}
}

func (a *activity) change(id, cluster string, d int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.active[cluster] += d
	if a.active[cluster] > 1 {
		a.overlap = append(a.overlap, fmt.Sprintf("%s started %s while another replica ran it", id, cluster))
	}
}

func (a *activity) overlaps() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.overlap...)
}

// watchedCtrl is a clusterCtrl that reports its activity.
type watchedCtrl struct {
	*clusterCtrl
	a           *activity
	id, cluster string
}

func (w *watchedCtrl) Run(ctx context.Context) error {
	w.a.change(w.id, w.cluster, 1)
	return w.clusterCtrl.Run(ctx)
}

func (w *watchedCtrl) Shutdown(ctx context.Context) {
	w.clusterCtrl.Shutdown(ctx)
	w.a.change(w.id, w.cluster, -1)
}

// fakeClusters starts n member API servers, answering, named cluster-0 to
// cluster-<n-1>: their names in order, and their configs by name.
func fakeClusters(t *testing.T, n int) ([]string, map[string]*rest.Config) {
	clusters := make([]string, n)
	cfgs := map[string]*rest.Config{}
	for i := range clusters {
		clusters[i] = fmt.Sprintf("cluster-%d", i)
		cfgs[clusters[i]] = newFakeMember(t, memberOK).config()
	}
	return clusters, cfgs
}

func runFleetSharded(t *testing.T, ids []string, partition bool) {
	const shards = 3
	act := &activity{active: map[string]int{}}
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	clusters, cfgs := fakeClusters(t, 8)
	var reps []*fleetReplica
	var clients []*leasetest.Client
	for _, id := range ids {
		client := srv.Client(id)
		clients = append(clients, client)
		reps = append(reps, newFleetReplica(t, client, spec, id, cfgs, act))
	}
	for _, r := range reps {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		require.NoError(t, r.mgr.Start(ctx, 0), r.id)
		cancel()
	}

	// Every replica holds a shard (the elector balances them), and every
	// cluster runs on its shard's holder alone.
	began := time.Now()
	pollUntil(t, 3*elWait, func() string {
		held := map[string]int{}
		for _, r := range reps {
			for i := range shards {
				if r.mgr.ShardLeaseGuard(i) == nil {
					held[r.id]++
				}
			}
		}
		for _, id := range ids {
			if held[id] == 0 {
				return fmt.Sprintf("shards held: %v", held)
			}
		}
		if why := spreadOK(reps, clusters, shards); why != "" {
			return why
		}
		// Each replica's runner adds every member's group, each once its
		// first probe has answered: on its own goroutine, perhaps after
		// the clusters have started on their shards' holders.
		for _, r := range reps {
			st, err := r.mgr.Status(context.Background())
			if err != nil {
				return fmt.Sprintf("%s: Status: %v", r.id, err)
			}
			for _, c := range clusters {
				if _, ok := st.Child("fleet/" + c); !ok {
					return fmt.Sprintf("%s has no group for %s yet", r.id, c)
				}
			}
		}
		return ""
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

	// Status names each cluster's shard and, on the replica holding it,
	// that replica as the holder (Kind "cluster").
	for _, r := range reps {
		st, err := r.mgr.Status(context.Background())
		require.NoError(t, err)
		for _, c := range clusters {
			shard := cm.ShardOf(c, shards)
			cs, ok := st.Child("fleet/" + c)
			require.True(t, ok, "%s: %s", r.id, c)
			require.Equal(t, actors.KindCluster, cs.Kind)
			require.NotNil(t, cs.Cluster)
			require.Equal(t, shard, cs.Cluster.Shard, "%s: %s", r.id, c)
			if r.mgr.ShardLeaseGuard(shard) == nil {
				require.Equal(t, r.id, cs.Cluster.Holder, "%s holds shard %d of %s", r.id, shard, c)
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
	t.Logf("spread after %v: %d of %d clusters on a", time.Since(began), len(onA), len(clusters))
	if partition {
		cut := time.Now()
		clients[0].Partition(true)
		reps[0].down = true
		pollUntil(t, 3*elWait, func() string { return spreadOK(reps, clusters, shards) })
		t.Logf("a's clusters ran on the others %v after it was cut off", time.Since(cut))
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		asked := time.Now()
		reps[0].mgr.ShutdownAndWait(ctx)
		cancel()
		reps[0].down = true
		stopped := time.Now()
		pollUntil(t, 3*elWait, func() string { return spreadOK(reps, clusters, shards) })
		t.Logf("a's clusters ran on the others %v after its shutdown returned (%v after it was asked)", time.Since(stopped), time.Since(asked))
	}
	for _, c := range clusters {
		require.False(t, reps[0].running(c), c)
		if partition {
			require.Error(t, reps[0].write(c), "a, cut off, writing to %s", c)
		}
		shard := cm.ShardOf(c, shards)
		for _, r := range reps[1:] {
			if r.mgr.ShardLeaseGuard(shard) == nil {
				require.NoError(t, r.write(c), "%s writing to %s", r.id, c)
			}
		}
	}
	require.Empty(t, act.overlaps())
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

// shardedFleetManager is a one-replica manager with shards shard Leases
// holding children.
func shardedFleetManager(t *testing.T, shards int32, children ...cm.Runnable) (*cm.ControllerManager, *eventLog) {
	t.Helper()
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	m.Add(children...)
	log := subscribe(t, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m, log
}

// Under sharding the runner is a store: a provider's failure is still
// supervised (restarted, the clusters kept), and an invalid fleet still
// makes Start fail naming "<fleet>/provider".
func TestFleetShardedRunnerIsSupervised(t *testing.T) {
	t.Run("provider fails", func(t *testing.T) {
		a := newFakeMember(t, memberOK)
		prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
		prov.fail = errors.New("inventory unreachable")
		bl := newBuilds()
		m, log := shardedFleetManager(t, 2, cm.NewFleet("fleet", prov, bl.build, fleetSpec()))
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		require.NoError(t, m.Start(ctx, 0))
		failed := log.waitFor(t, nil, 0, is(cm.ChildFailed, "fleet/provider"))
		require.ErrorContains(t, failed.Err, "inventory unreachable")
		log.waitFor(t, nil, 0, is(cm.ChildRestarted, "fleet/provider"))
		log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
		pollUntil(t, elWait, func() string {
			if len(bl.of("a")) != 1 || bl.of("a")[0].runs.Load() == 0 {
				return "cluster a's controller has not run"
			}
			return ""
		})
		require.Len(t, bl.of("a"), 1, "the cluster was kept across the provider's restart")
		require.Zero(t, bl.of("a")[0].stops.Load())
	})
	t.Run("invalid", func(t *testing.T) {
		m, _ := shardedFleetManager(t, 2, cm.NewFleet("fleet", nil, nil, fleetSpec()))
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		err := m.Start(ctx, 0)
		require.Error(t, err)
		require.ErrorContains(t, err, "fleet/provider")
		require.ErrorContains(t, err, "provider is nil")
	})
}
