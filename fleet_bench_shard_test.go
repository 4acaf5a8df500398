package controllermanager_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// BenchmarkFleetShardedReplicas measures a fleet of N member clusters (one
// in-process API server answering for all but one) on 3 replicas with
// sharded leadership (6 shards, leasetest's API server, the election
// timing of the unit tests: retry period 100 ms), per iteration:
//
//   - ms-to-running: from the replicas' Start until every member's
//     subtree runs, each on exactly one replica;
//   - lease-req/s: every Lease request (get, list, create, update) the 3
//     replicas send, over a 2 s window once all run: (S + R) writes per
//     retry period is 90/s, whatever N;
//   - ms-offline-to-stopped: one member's API server failing its probes
//     (FailureThreshold 2 s, ProbePeriod 1 s) until its subtree has
//     stopped on the replica running it; ms-back-to-running: answering
//     again (SuccessThreshold 1 s) until it runs again.
func BenchmarkFleetShardedReplicas(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
			defer ok.Close()
			var failing atomic.Bool
			flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/readyz" && failing.Load() {
					http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
					return
				}
				_, _ = io.WriteString(w, "ok")
			}))
			defer flaky.Close()
			clusters := make(map[string]*rest.Config, n)
			for i := range n - 1 {
				clusters["m"+strconv.Itoa(i)] = &rest.Config{Host: ok.URL}
			}
			const victim = "flaky"
			clusters[victim] = &rest.Config{Host: flaky.URL}

			var toRunning, reqRate, toStopped, toBack float64
			for b.Loop() {
				failing.Store(false)
				r := runShardedFleet(b, clusters)
				toRunning += r.waitAll(b, n)

				before := r.requests.Load()
				window := time.Now()
				timer := time.NewTimer(2 * time.Second) // a rate: measured over a window of time
				<-timer.C
				reqRate += float64(r.requests.Load()-before) / time.Since(window).Seconds()

				failedAt := time.Now()
				failing.Store(true)
				r.waitCluster(b, victim, false)
				toStopped += float64(time.Since(failedAt).Milliseconds())
				backAt := time.Now()
				failing.Store(false)
				r.waitCluster(b, victim, true)
				toBack += float64(time.Since(backAt).Milliseconds())
				r.stop()
			}
			b.ReportMetric(toRunning/float64(b.N), "ms-to-running")
			b.ReportMetric(reqRate/float64(b.N), "lease-req/s")
			b.ReportMetric(toStopped/float64(b.N), "ms-offline-to-stopped")
			b.ReportMetric(toBack/float64(b.N), "ms-back-to-running")
		})
	}
}

// shardedFleet is 3 replicas running one fleet, and what runs where.
type shardedFleet struct {
	mgrs     []*cm.ControllerManager
	requests atomic.Int64 // Lease requests of every replica
	mu       sync.Mutex
	running  map[string]int // cluster → replicas running its controller now
	began    time.Time
}

// benchCtrl is a member's controller: it counts itself running.
type benchCtrl struct {
	f       *shardedFleet
	cluster string
}

func (c *benchCtrl) Name() string { return "ctrl" }
func (c *benchCtrl) Run(context.Context) error {
	c.f.mu.Lock()
	c.f.running[c.cluster]++
	c.f.mu.Unlock()
	return nil
}
func (c *benchCtrl) Shutdown(context.Context) {
	c.f.mu.Lock()
	c.f.running[c.cluster]--
	c.f.mu.Unlock()
}
func (c *benchCtrl) GetHealth() cm.HealthStatus { return cm.HealthStatus{Name: "ctrl", Healthy: true} }

func runShardedFleet(b *testing.B, clusters map[string]*rest.Config) *shardedFleet {
	b.Helper()
	f := &shardedFleet{running: map[string]int{}}
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = 6
	fspec := cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: time.Second},
		ProbeTimeout:     metav1.Duration{Duration: 500 * time.Millisecond},
		FailureThreshold: metav1.Duration{Duration: 2 * time.Second},
		SuccessThreshold: metav1.Duration{Duration: time.Second},
	}
	for i := range 3 {
		id := fmt.Sprintf("r%d", i)
		client := srv.Client(id)
		client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			f.requests.Add(1)
			return false, nil, nil
		})
		m, err := cm.NewControllerManager(cm.NewContext(client),
			cm.ControllerManagerConfigSpec{LeaderElection: spec}, "", cm.WithIdentity(id), cm.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		m.Add(cm.NewFleet("fleet", cm.StaticClusters(clusters), func(c cm.Cluster) []cm.Runnable {
			return []cm.Runnable{&benchCtrl{f: f, cluster: c.Name()}}
		}, fspec))
		f.mgrs = append(f.mgrs, m)
	}
	f.began = time.Now()
	for _, m := range f.mgrs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := m.Start(ctx, 0); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	return f
}

// waitAll waits until each of the n members runs on exactly one replica,
// polling, and returns the milliseconds since the replicas were started.
func (f *shardedFleet) waitAll(b *testing.B, n int) float64 {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		f.mu.Lock()
		once := 0
		for _, k := range f.running {
			if k == 1 {
				once++
			}
		}
		f.mu.Unlock()
		if once == n {
			return float64(time.Since(f.began).Milliseconds())
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d members running once after 5 minutes", once, n)
		}
		<-tick.C
	}
}

// waitCluster waits until cluster's controller runs (on one replica) or
// runs nowhere.
func (f *shardedFleet) waitCluster(b *testing.B, cluster string, running bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		f.mu.Lock()
		k := f.running[cluster]
		f.mu.Unlock()
		if (running && k == 1) || (!running && k == 0) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("cluster %s: running on %d replicas, want running %v", cluster, k, running)
		}
		<-tick.C
	}
}

func (f *shardedFleet) stop() {
	var wg sync.WaitGroup
	for _, m := range f.mgrs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			m.ShutdownAndWait(ctx)
		})
	}
	wg.Wait()
}
