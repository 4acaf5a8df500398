package controllermanager_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// Under sharded leadership a member's webhooks, like its stores, are
// served by every replica that holds a shard, not only by the holder of
// the cluster's shard (webhooks do not run under a lease): the API server
// in front of the replicas' Service may send a review to any of them. A
// standby holding no shard (3 replicas, 2 shards) serves none of them.
func TestFleetShardedMemberWebhooksServedByEveryReplica(t *testing.T) {
	const shards = 2
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	clusters, cfgs := fakeClusters(t, 4)
	type replica struct {
		id  string
		mgr *cm.ControllerManager
		url string
	}
	var reps []replica
	var starts sync.WaitGroup
	t.Cleanup(starts.Wait)
	for _, id := range []string{"r1", "r2", "r3"} {
		m, err := cm.NewControllerManager(cm.NewContext(srv.Client(id)),
			cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity(id), elQuiet)
		require.NoError(t, err)
		m.Add(cm.NewFleet("fleet", newHandProvider(cfgs), func(c cm.Cluster) []cm.Runnable {
			return []cm.Runnable{&memberWebhook{cluster: c.Name(), path: "/validate-" + c.Name()}}
		}, fleetSpec()))
		hs := httptest.NewServer(m.Handler())
		t.Cleanup(func() {
			hs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			m.ShutdownAndWait(ctx)
		})
		reps = append(reps, replica{id: id, mgr: m, url: hs.URL})
	}
	// A standby's Start waits until it is elected: each starts on a
	// goroutine of its own, which the manager's shutdown at the test's
	// end returns (starts.Wait runs after the shutdowns: registered first).
	for _, r := range reps {
		starts.Go(func() { _ = r.mgr.Start(context.Background(), 0) })
	}
	pollUntil(t, 3*elWait, func() string {
		holders := 0
		for _, r := range reps {
			held := 0
			for i := range shards {
				if r.mgr.ShardLeaseGuard(i) == nil {
					held++
				}
			}
			if held > 0 {
				holders++
			}
			for _, c := range clusters {
				code, by := answeredBy(t, r.url+"/validate-"+c)
				switch {
				case held > 0 && (code != http.StatusOK || by != c):
					return fmt.Sprintf("%s (%d shards) answered %d from %q for %s", r.id, held, code, by, c)
				case held == 0 && code != http.StatusNotFound:
					return fmt.Sprintf("%s (no shard) answered %d for %s", r.id, code, c)
				}
			}
		}
		if holders != shards {
			return fmt.Sprintf("%d replicas hold a shard", holders)
		}
		return ""
	})
}
