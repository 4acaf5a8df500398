package health_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// benchController is a healthy controller named by its index.
type benchController struct{ name string }

func (c benchController) Name() string            { return c.name }
func (benchController) Run(context.Context) error { return nil }
func (benchController) Shutdown(context.Context)  {}
func (c benchController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

// benchServer serves the probes of a running manager with n controllers.
func benchServer(b *testing.B, n int) (*cm.ControllerManager, *httptest.Server, *http.Client) {
	b.Helper()
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{HealthInterval: duration(time.Hour)}},
		"", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		m.Add(benchController{name: fmt.Sprintf("controller-%04d", i)})
	}
	if err := m.Start(context.Background(), time.Minute); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(health.NewHandler(m))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		m.ShutdownAndWait(context.Background())
	})
	return m, srv, client
}

func probe(b *testing.B, client *http.Client, url string) {
	res, err := client.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.Errorf("GET %s: %d", url, res.StatusCode)
	}
}

// BenchmarkHealthz measures /healthz over real HTTP against a manager with
// 1,000 controllers: the latency of one probe at a time, and the requests
// per second 64 concurrent clients get.
func BenchmarkHealthz(b *testing.B) {
	const controllers = 1000
	m, srv, client := benchServer(b, controllers)
	url := srv.URL + "/healthz"

	b.Run("GetHealth", func(b *testing.B) { // the sweep alone, no HTTP
		for b.Loop() {
			if n := len(m.GetHealth()); n != controllers {
				b.Fatalf("%d entries", n)
			}
		}
	})
	b.Run("latency", func(b *testing.B) {
		for b.Loop() {
			probe(b, client, url)
		}
	})
	b.Run("clients=64", func(b *testing.B) {
		sweeps := sweepCount(b, m)
		b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				probe(b, client, url)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		b.ReportMetric(float64(b.N)/float64(sweepCount(b, m)-sweeps), "req/sweep")
	})
}

// sweepCount is how many times the manager's GetHealth has swept the tree.
func sweepCount(b *testing.B, m *cm.ControllerManager) uint64 {
	families, err := m.Gatherer().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "controllermanager_health_probe_duration_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	b.Fatal("no controllermanager_health_probe_duration_seconds")
	return 0
}
