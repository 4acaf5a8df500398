package controllermanager_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
)

// BenchmarkFleetEngage measures, per iteration, a manager with a fleet of
// N member clusters (one in-process API server answering for all) from
// Start until every member is Online, its subtree running, then its
// shutdown. ns/op is that whole time; "ms-to-online" the part until every
// member was Online.
func BenchmarkFleetEngage(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
			defer srv.Close()
			clusters := make(map[string]*rest.Config, n)
			for i := range n {
				clusters["m"+strconv.Itoa(i)] = &rest.Config{Host: srv.URL}
			}
			var online time.Duration
			for b.Loop() {
				mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
					cm.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				fleet := cm.NewFleet("fleet", cm.StaticClusters(clusters), func(cm.Cluster) []cm.Runnable {
					return []cm.Runnable{&clusterCtrl{}}
				}, cm.FleetSpec{})
				mgr.Add(fleet)
				start := time.Now()
				if err := mgr.Start(context.Background(), 0); err != nil {
					b.Fatal(err)
				}
				for !allOnline(fleet, n) {
					if time.Since(start) > 5*time.Minute {
						b.Fatal("not every member Online within 5 minutes")
					}
					time.Sleep(time.Millisecond) // a benchmark's poll, not a test's synchronisation
				}
				online += time.Since(start)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				mgr.ShutdownAndWait(ctx)
				cancel()
			}
			b.ReportMetric(float64(online.Milliseconds())/float64(b.N), "ms-to-online")
		})
	}
}

func allOnline(f *cm.Fleet, n int) bool {
	cs := f.Clusters()
	if len(cs) != n {
		return false
	}
	for _, c := range cs {
		if c.State != cm.ClusterStateOnline {
			return false
		}
	}
	return true
}
