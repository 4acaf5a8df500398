package controllermanager_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// Under sharded leadership a member's webhooks, like its stores, are
// served by every replica that holds a shard, not only by the holder of
// the cluster's shard (webhooks do not run under a lease): the API server
// in front of the replicas' Service may send a review to any of them.
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
	for _, id := range []string{"r1", "r2"} {
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
	for _, r := range reps {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		require.NoError(t, r.mgr.Start(ctx, 0), r.id)
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
			for _, c := range clusters {
				if code, by := answeredBy(t, r.url+"/validate-"+c); code != http.StatusOK || by != c {
					return fmt.Sprintf("%s answered %d from %q for %s", r.id, code, by, c)
				}
			}
		}
		return ""
	})
}
