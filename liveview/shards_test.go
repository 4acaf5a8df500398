package liveview_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/liveview"
)

// With sharded leadership the view lists every shard: its Lease, whether
// this replica holds it, and the controllers pinned to it.
func TestStatusShowsTheShards(t *testing.T) {
	yes := true
	spec := cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
		Enabled: &yes, LeaseName: "ops", LeaseNamespace: "ns", Shards: 3, OnLeaseLost: cm.LeaseLostReelect,
		LeaseDuration: metav1.Duration{Duration: 2 * time.Second}, RenewDeadline: metav1.Duration{Duration: time.Second},
		RetryPeriod: metav1.Duration{Duration: 100 * time.Millisecond},
	}}
	m, err := cm.NewControllerManager(cm.NewContext(leasetest.NewServer().Client("a")), spec, "", cm.WithIdentity("a"),
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	m.AddSharded("worker", func(s cm.Shard) cm.Controller { return &failing{name: "ignored"} })
	srv := serve(t, liveview.Handler(m))
	start(t, m)
	// Start returns once the first shard's controllers run; the others
	// follow on the elector's next steps.
	deadline := time.Now().Add(wait)
	st := getStatus(t, srv)
	for !allHeld(st.Leadership.Shards) && time.Now().Before(deadline) {
		<-time.After(10 * time.Millisecond)
		st = getStatus(t, srv)
	}
	shards := st.Leadership.Shards
	if len(shards) != 3 {
		t.Fatalf("want 3 shards in the view, have %+v", st.Leadership)
	}
	for i, sh := range shards {
		if sh.Index != i || sh.Lease != "ops-"+string(rune('0'+i)) || !sh.Held || len(sh.Children) != 1 || sh.Children[0] != "worker-"+string(rune('0'+i)) {
			t.Errorf("shard %d: want Lease ops-%d held here with worker-%d, have %+v", i, i, i, sh)
		}
	}
	if !st.Leadership.Leader {
		t.Errorf("a replica holding every shard shows as leader; have %+v", st.Leadership)
	}
}

func allHeld(shards []liveview.Shard) bool {
	for _, sh := range shards {
		if !sh.Held {
			return false
		}
	}
	return len(shards) > 0
}
