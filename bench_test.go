package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The benchmarks put each manager operation beside the same work done the
// seed's way (RunControllers and ShutdownRunnables: a WaitGroup of
// goroutines, no supervision) in one run, so the ratio shows whatever the
// machine is doing. Run them with:
//
//	go test -run '^$' -bench . -benchmem
var benchSizes = []int{100, 1000, 10000}

// noop is the cheapest controller there is: it owns nothing.
type noop struct{ name string }

func (n *noop) Name() string               { return n.name }
func (n *noop) Run(context.Context) error  { return nil }
func (n *noop) Shutdown(context.Context)   {}
func (n *noop) GetHealth() cm.HealthStatus { return cm.HealthStatus{Name: n.name, Healthy: true} }
func noops(n int) []cm.Controller {
	out := make([]cm.Controller, n)
	for i := range out {
		out[i] = &noop{name: fmt.Sprintf("c%05d", i)}
	}
	return out
}

func benchManager(b testing.TB, ctrls []cm.Controller) *cm.ControllerManager {
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range ctrls {
		m.Add(c)
	}
	return m
}

func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		ctrls := noops(n)
		b.Run(fmt.Sprintf("n=%d/seed", n), func(b *testing.B) {
			for b.Loop() {
				if err := cm.RunControllers(ctx, ctrls); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/manager", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				m := benchManager(b, ctrls)
				b.StartTimer()
				if err := m.Start(ctx, 0); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				m.ShutdownAndWait(ctx)
				b.StartTimer()
			}
		})
	}
}

func BenchmarkShutdown(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		ctrls := noops(n)
		runnables := make([]cm.Runnable, n)
		for i, c := range ctrls {
			runnables[i] = c
		}
		b.Run(fmt.Sprintf("n=%d/seed", n), func(b *testing.B) {
			for b.Loop() {
				cm.ShutdownRunnables(ctx, runnables)
			}
		})
		b.Run(fmt.Sprintf("n=%d/manager", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				m := benchManager(b, ctrls)
				if err := m.Start(ctx, 0); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				m.ShutdownAndWait(ctx)
			}
		})
	}
}

func BenchmarkGetHealth(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		ctrls := noops(n)
		b.Run(fmt.Sprintf("n=%d/seed", n), func(b *testing.B) {
			for b.Loop() {
				out := make([]cm.HealthStatus, 0, n)
				for _, c := range ctrls {
					out = append(out, c.GetHealth())
				}
				_ = out
			}
		})
		b.Run(fmt.Sprintf("n=%d/manager", n), func(b *testing.B) {
			m := benchManager(b, ctrls)
			if err := m.Start(ctx, 0); err != nil {
				b.Fatal(err)
			}
			defer m.ShutdownAndWait(ctx)
			for b.Loop() {
				if h := m.GetHealth(); len(h) != n || !h[n-1].Healthy {
					b.Fatalf("health: %d entries, last %+v", len(h), h[len(h)-1])
				}
			}
		})
	}
}

// BenchmarkIdleChild reports what an idle child costs once started: heap
// bytes and goroutines per child (the controller's own few bytes included).
func BenchmarkIdleChild(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var bytesPer, goroutinesPer float64
			for range b.N {
				ctrls := noops(n)
				base := heapInUse()
				goroutines := runtime.NumGoroutine()
				m := benchManager(b, ctrls)
				if err := m.Start(ctx, 0); err != nil {
					b.Fatal(err)
				}
				bytesPer = float64(heapInUse()-base) / float64(n)
				goroutinesPer = float64(runtime.NumGoroutine()-goroutines) / float64(n)
				m.ShutdownAndWait(ctx)
			}
			b.ReportMetric(bytesPer, "B/child")
			b.ReportMetric(goroutinesPer, "goroutines/child")
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkRestart measures the time from a failure reported by a
// controller's background work to its Run entered again, with a backoff of
// a nanosecond (no wait). It reports the median and the 99th percentile.
func BenchmarkRestart(b *testing.B) {
	entered := make(chan struct{}, 1)
	m, c := benchOneController(b, &cm.SupervisionSpec{
		MaxRestarts:    1 << 30,
		RestartWindow:  metav1.Duration{Duration: time.Nanosecond},
		InitialBackoff: metav1.Duration{Duration: time.Nanosecond},
		MaxBackoff:     metav1.Duration{Duration: time.Nanosecond},
	}, func(context.Context, int) error {
		entered <- struct{}{}
		return nil
	})
	<-entered
	errFailed := errors.New("failed")
	latencies := make([]time.Duration, 0, b.N)
	for b.Loop() {
		waitRunning(b, m)
		begin := time.Now()
		c.Fail(errFailed)
		<-entered
		latencies = append(latencies, time.Since(begin))
	}
	reportQuantiles(b, latencies, "p50-ns", "p99-ns")
}

// benchOneController starts a manager (supervision sup, nil for the
// defaults) of one controller "c" whose Run is run, and shuts it down when
// the benchmark ends.
func benchOneController(b *testing.B, sup *cm.SupervisionSpec, run func(context.Context, int) error) (*cm.ControllerManager, *testchild.Controller) {
	return benchOneControllerOn(b, cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: sup}, run)
}

// benchOneControllerOn is benchOneController with the manager's context and
// spec given (leader election, for one).
func benchOneControllerOn(b *testing.B, mctx cm.Context, spec cm.ControllerManagerConfigSpec, run func(context.Context, int) error) (*cm.ControllerManager, *testchild.Controller) {
	c := testchild.NewController("c", testchild.Behavior{Run: run})
	m, err := cm.NewControllerManager(mctx, spec, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)), cm.WithEventBuffer(1))
	if err != nil {
		b.Fatal(err)
	}
	m.Add(c)
	if err := m.Start(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.ShutdownAndWait(context.Background()) })
	return m, c
}

// reportQuantiles reports the median and the 99th percentile of
// latencies, in nanoseconds, as the metrics p50 and p99.
func reportQuantiles(b *testing.B, latencies []time.Duration, p50, p99 string) {
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Nanoseconds()), p50)
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Nanoseconds()), p99)
}

// waitRunning waits until the child's last Run has been reported, so that
// the next failure is one of the current incarnation.
func waitRunning(b *testing.B, m *cm.ControllerManager) {
	for {
		st, err := m.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if c, _ := st.Child("c"); c.State == "Running" {
			return
		}
	}
}

// BenchmarkRestartChild measures a RestartChild of a running controller:
// from the call until its Run is entered again (p50-to-run-ns, p99), and
// until the call has returned, which waits for that Run to be reported
// (ns/op); without leader election and with it (a leasetest server).
func BenchmarkRestartChild(b *testing.B) {
	b.Run("election=off", func(b *testing.B) {
		benchRestartChild(b, cm.NewContext(nil), cm.ControllerManagerConfigSpec{})
	})
	// Under the lease, the restart does not travel with the Stop: the
	// root starts the controller again once it has stopped, where it
	// checks that the lease is still held. client-go's default timings,
	// so that renewals are rare beside the calls.
	b.Run("election=on", func(b *testing.B) {
		yes := true
		spec := cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: "bench", LeaseNamespace: "bench",
			LeaseDuration: metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 2 * time.Second},
		}}
		benchRestartChild(b, cm.NewContext(leasetest.NewServer().Client("bench")), spec)
	})
}

func benchRestartChild(b *testing.B, mctx cm.Context, spec cm.ControllerManagerConfigSpec) {
	ctx := context.Background()
	entered := make(chan time.Time, 1)
	m, _ := benchOneControllerOn(b, mctx, spec, func(context.Context, int) error {
		entered <- time.Now()
		return nil
	})
	<-entered
	toRun := make([]time.Duration, 0, b.N)
	for b.Loop() {
		begin := time.Now()
		if err := m.RestartChild(ctx, "c"); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-entered:
			toRun = append(toRun, at.Sub(begin))
		default:
			b.Fatal("RestartChild returned before Run was entered again")
		}
	}
	reportQuantiles(b, toRun, "p50-to-run-ns", "p99-to-run-ns")
}
