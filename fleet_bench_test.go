package controllermanager_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
)

// BenchmarkFleetEngage measures, per iteration, a manager with a fleet of
// N member clusters (one in-process API server answering for all) from
// Start until every member is Online, its subtree running, then its
// shutdown. ns/op is that whole time; "ms-to-online" the part until every
// member was Online; "heap-B/cluster" the live heap (after a GC) with every
// member Online, less the heap before the manager was built, per member
// (no informers: each member's subtree is one controller).
func BenchmarkFleetEngage(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
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
			var heap float64
			for b.Loop() {
				base := liveHeap()
				mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
					cm.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				fleet := cm.NewFleet("fleet", cm.StaticClusters(clusters), func(cm.Cluster) []cm.Runnable {
					return []cm.Runnable{&clusterCtrl{}}
				}, cm.FleetSpec{})
				mgr.Add(fleet)
				// Every member's ClusterOnline event, counted as it is
				// delivered: no poll competes with the fleet for the CPU.
				var up atomic.Int64
				allUp := make(chan struct{})
				unsub := mgr.Subscribe(func(e cm.Event) {
					if e.Type == cm.ClusterOnline && up.Add(1) == int64(n) {
						close(allUp)
					}
				})
				start := time.Now()
				if err := mgr.Start(context.Background(), 0); err != nil {
					b.Fatal(err)
				}
				select {
				case <-allUp:
				case <-time.After(5 * time.Minute):
					b.Fatal("not every member Online within 5 minutes")
				}
				unsub()
				if !allOnline(fleet, n) {
					b.Fatal("n ClusterOnline events, but not every member Online")
				}
				online += time.Since(start)
				b.StopTimer()
				heap += float64(liveHeap()-base) / float64(n)
				b.StartTimer()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				mgr.ShutdownAndWait(ctx)
				cancel()
			}
			b.ReportMetric(float64(online.Milliseconds())/float64(b.N), "ms-to-online")
			b.ReportMetric(heap/float64(b.N), "heap-B/cluster")
		})
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
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
