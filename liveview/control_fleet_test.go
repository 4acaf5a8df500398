package liveview_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// oneCluster engages one member cluster, "a", at cfg.
type oneCluster struct{ cfg *rest.Config }

func (p oneCluster) Run(ctx context.Context, engage func(string, *rest.Config) error, _ func(string)) error {
	if err := engage("a", p.cfg); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// A restart or start of an Offline member cluster's group is refused by
// the cluster's state (ErrClusterOffline), which is a conflict (409) that
// names it, not a server error: the fleet starts the group once the
// cluster answers again. Before, 500.
func TestControlOfAnOfflineMemberIsAConflict(t *testing.T) {
	var down atomic.Bool
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(member.Close)
	fleet := cm.NewFleet("fleet", oneCluster{cfg: &rest.Config{Host: member.URL}}, func(cm.Cluster) []cm.Runnable {
		return []cm.Runnable{&failing{name: "ctrl"}}
	}, cm.FleetSpec{
		ProbePeriod: duration(50 * time.Millisecond), FailureThreshold: duration(100 * time.Millisecond),
		SuccessThreshold: duration(100 * time.Millisecond),
	})
	const token = "s3cret"
	m := newRunningManager(t, fleet)
	srv := serve(t, liveview.Handler(m, liveview.WithControls(token)))
	start(t, m)
	inState := func(want cm.ClusterState) {
		t.Helper()
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if st, ok := fleet.Cluster("a"); ok && st.State == want {
				return
			}
			select {
			case <-tick.C:
			case <-deadline.C:
				t.Fatalf("cluster a never went %s", want)
			}
		}
	}
	inState(cm.ClusterStateOnline)
	down.Store(true)
	inState(cm.ClusterStateOffline)
	good := map[string]string{liveview.TokenHeader: token}
	for _, c := range []struct{ action, child string }{{"restart", "fleet/a"}, {"start", "fleet/a"}, {"restart", "fleet/a/ctrl"}} {
		res := post(t, srv, action(c.action, c.child), good)
		if res.code != http.StatusConflict || !strings.Contains(res.body, "cluster offline") {
			t.Errorf("%s %s: have %d %q, want 409 saying the cluster is offline", c.action, c.child, res.code, res.body)
		}
	}
}
