package health_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// Both managers are probed by this package, with every optional
// capability it detects.
var (
	_ health.Source        = (*cm.ControllerManager)(nil)
	_ health.Source        = (*cm.WebhookManager)(nil)
	_ health.Source        = (*cm.BaseManager)(nil)
	_ health.Stopper       = (*cm.ControllerManager)(nil)
	_ health.Stopper       = (*cm.WebhookManager)(nil)
	_ health.StatusSource  = (*cm.ControllerManager)(nil)
	_ health.StatusSource  = (*cm.WebhookManager)(nil)
	_ health.TimeoutSource = (*cm.ControllerManager)(nil)
	_ health.TimeoutSource = (*cm.WebhookManager)(nil)
	_ health.CheckProvider = (*cm.ControllerManager)(nil)
)

// controller is a controller whose health the test sets; a GetHealth with
// hang set blocks until it is released.
type controller struct {
	name    string
	healthy atomic.Bool
	hang    *hang
}

func newController(name string) *controller {
	c := &controller{name: name}
	c.healthy.Store(true)
	return c
}

func (c *controller) Name() string              { return c.name }
func (c *controller) Run(context.Context) error { return nil }
func (c *controller) Shutdown(context.Context)  {}
func (c *controller) GetHealth() cm.HealthStatus {
	if c.hang != nil {
		c.hang.block()
	}
	st := cm.HealthStatus{Name: c.name, Healthy: c.healthy.Load()}
	if !st.Healthy {
		st.Message = "workqueue stalled"
	}
	return st
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// newControllerManager returns a ControllerManager running ctrls under
// supervision, shut down when the test ends.
func newControllerManager(t *testing.T, sup *cm.SupervisionSpec, ctrls ...*controller) *cm.ControllerManager {
	t.Helper()
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{Supervision: sup}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	for _, c := range ctrls {
		m.Add(c)
	}
	return m
}

func start(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	if err := m.Start(context.Background(), wait); err != nil {
		t.Fatal(err)
	}
}

func TestManagerLifecycle(t *testing.T) {
	jobs := newController("jobs")
	m := newControllerManager(t, &cm.SupervisionSpec{HealthInterval: duration(time.Hour)}, jobs)
	srv := serve(t, health.NewHandler(m))

	steps := []struct {
		name     string
		before   func()
		path     string
		accept   string
		wantCode int
		wantBody string
	}{
		{name: "not started: alive, not ready", path: "/healthz?verbose", wantCode: 200,
			wantBody: lines("[+]phase ok", "healthz check passed")},
		{name: "not started: not ready", path: "/readyz", wantCode: 503,
			wantBody: lines("[-]manager failed: reason withheld", "readyz check failed")},
		{name: "not started: not ready, verbose", path: "/readyz?verbose", wantCode: 503,
			wantBody: lines("[-]manager failed: controllermanager: not ready: manager not started", "readyz check failed")},
		{name: "running: JSON", before: func() { start(t, m) }, path: "/healthz", accept: "application/json", wantCode: 200,
			wantBody: `{"healthy":true,"status":[{"name":"jobs","healthy":true}],"checks":[{"name":"phase","healthy":true,"message":"Running"}]}` + "\n"},
		{name: "running: ready", path: "/readyz", wantCode: 200, wantBody: "ok"},
		{name: "unhealthy controller", before: func() { jobs.healthy.Store(false) }, path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[+]phase ok", "[-]controller/jobs failed: workqueue stalled", "healthz check failed")},
		{name: "unhealthy controller, alone", path: "/healthz/controller/jobs", wantCode: 500,
			wantBody: "controller/jobs check failed: workqueue stalled\n"},
		{name: "unhealthy controller, excluded", path: "/healthz?exclude=controller/jobs", accept: "application/json", wantCode: 200,
			wantBody: `{"healthy":true,"status":[],"checks":[{"name":"phase","healthy":true,"message":"Running"}]}` + "\n"},
		{name: "stopped: not alive", before: func() {
			jobs.healthy.Store(true)
			m.ShutdownAndWait(context.Background())
		}, path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[-]phase failed: manager stopped", "[-]controller/jobs failed: manager stopped", "healthz check failed")},
		{name: "stopped: not alive either", path: "/livez", wantCode: 500,
			wantBody: lines("[+]ping ok", "[-]phase failed: reason withheld", "livez check failed")},
		{name: "stopped: not ready", path: "/readyz?verbose", wantCode: 503,
			wantBody: lines("[-]manager failed: controllermanager: not ready: manager stopped", "readyz check failed")},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		have := doAccept(t, srv, http.MethodGet, s.path, s.accept)
		if have.code != s.wantCode || have.body != s.wantBody {
			t.Errorf("%s: GET %s\nwant %d %q\nhave %d %q", s.name, s.path, s.wantCode, s.wantBody, have.code, have.body)
		}
	}
}

func TestManagerHungController(t *testing.T) {
	const healthTimeout = 200 * time.Millisecond
	hung := newController("cron")
	hung.hang = newHang(t)
	m := newControllerManager(t, &cm.SupervisionSpec{HealthTimeout: duration(healthTimeout), HealthInterval: duration(time.Hour)},
		newController("jobs"), hung)
	start(t, m)
	srv := serve(t, health.NewHandler(m)) // the timeout is the manager's HealthTimeout

	// The manager names the hung controller once its HealthTimeout has
	// passed; the handler waits a margin (50ms here) past it for that
	// answer, then says only that the manager did not answer. On a loaded
	// machine the manager's answer can miss the margin: that answer is
	// accepted too (it is as unhealthy), and the manager's own is asked for
	// again, until three have come.
	want := lines("[+]phase ok", "[+]controller/jobs ok", "[-]controller/cron failed: no health answer within 200ms", "healthz check failed")
	late := lines("[+]phase ok", "[-]controllers failed: no answer from GetHealth within 250ms", "healthz check failed")
	named := 0
	for try := 0; named < 3 && try < 30; try++ {
		have := get(t, srv, "/healthz?verbose")
		switch {
		case have.code == 500 && have.body == want:
			named++
		case have.code == 500 && have.body == late:
			t.Logf("the manager's answer missed the handler's margin (a loaded machine): %q", have.body)
		default:
			t.Errorf("want 500 %q\nhave %d %q", want, have.code, have.body)
		}
		if limit := healthTimeout + 50*time.Millisecond + slack; have.elapsed > limit {
			t.Errorf("answered in %s, want within %s", have.elapsed, limit)
		}
	}
	if named < 3 {
		t.Errorf("the manager named the hung controller in %d answers, want 3", named)
	}
	if have := get(t, srv, "/readyz"); have.code != 200 {
		t.Errorf("a hung controller does not make the manager unready: have %d %q", have.code, have.body)
	}
	if calls := hung.hang.calls.Load(); calls != 1 {
		t.Errorf("the hung GetHealth was called %d times; want once, the others waiting for its answer", calls)
	}
}

func TestManagerEscalated(t *testing.T) {
	flaky := newController("flaky")
	flaky.healthy.Store(false)
	m := newControllerManager(t, &cm.SupervisionSpec{
		MaxRestarts: 1, InitialBackoff: duration(time.Millisecond), HealthInterval: duration(10 * time.Millisecond), UnhealthyThreshold: 1,
	}, flaky)
	srv := serve(t, health.NewHandler(m))
	start(t, m)
	select {
	case <-m.Done():
	case <-time.After(wait):
		t.Fatal("the manager did not escalate")
	}
	have := get(t, srv, "/healthz/phase")
	want := fmt.Sprintf("phase check failed: manager failed: %v\n", m.Err())
	if have.code != 500 || have.body != want || !strings.Contains(have.body, `controller "flaky" failed 2 times`) {
		t.Errorf("want 500 %q\nhave %d %q", want, have.code, have.body)
	}
	if have := get(t, srv, "/readyz"); have.code != http.StatusServiceUnavailable {
		t.Errorf("readyz: want 503, have %d %q", have.code, have.body)
	}
}

func TestManagerScrape(t *testing.T) {
	m := newControllerManager(t, &cm.SupervisionSpec{HealthInterval: duration(time.Hour)}, newController("jobs"))
	start(t, m)
	srv := serve(t, health.NewHandler(m, health.WithMetrics(m.Gatherer())))
	for range 2 {
		get(t, srv, "/healthz")
	}
	have := get(t, srv, "/metrics")
	if have.code != 200 || !strings.HasPrefix(have.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", have.code, have.header.Get("Content-Type"))
	}
	for _, want := range []string{
		"# TYPE controllermanager_phase gauge\n",
		`controllermanager_phase{phase="Running"} 1` + "\n",
		`controllermanager_phase{phase="Starting"} 0` + "\n",
		"# TYPE controllermanager_child_restarts_total counter\n",
		`controllermanager_child_restarts_total{child="jobs",kind="controller"} 0` + "\n",
		`controllermanager_child_failures_total{child="jobs",kind="controller"} 0` + "\n",
		`controllermanager_child_healthy{child="jobs",kind="controller"} 1` + "\n",
		"# TYPE controllermanager_health_probe_duration_seconds histogram\n",
		"controllermanager_health_probe_duration_seconds_count 2\n",
	} {
		if !strings.Contains(have.body, want) {
			t.Errorf("the scrape lacks %q:\n%s", want, have.body)
		}
	}
	if strings.Contains(have.body, "go_goroutines") {
		t.Error("the manager's registry has the Go collector: it should hold the manager's metrics only")
	}
}

func TestManagerLeaseWatchdog(t *testing.T) {
	enabled := true
	m, err := cm.NewControllerManager(cm.NewContext(fake.NewClientset()), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{Enabled: &enabled, LeaseNamespace: "jobs"},
		Supervision:    &cm.SupervisionSpec{HealthInterval: duration(time.Hour)},
	}, "jobs-operator", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.ShutdownAndWait(context.Background()) })
	m.Add(newController("jobs"))
	start(t, m)
	srv := serve(t, health.NewHandler(m))

	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz?verbose", 200, lines("[+]phase ok", "[+]controller/jobs ok", "[+]leaderElection ok", "healthz check passed")},
		{"/healthz/leaderElection", 200, "ok"},
		{"/healthz?verbose&exclude=leaderElection&exclude=controllers", 200, lines("[+]phase ok", "[+]controllers excluded: ok", "[+]leaderElection excluded: ok", "healthz check passed")},
	}
	for _, tt := range tests {
		if have := get(t, srv, tt.path); have.code != tt.wantCode || have.body != tt.wantBody {
			t.Errorf("GET %s: want %d %q, have %d %q", tt.path, tt.wantCode, tt.wantBody, have.code, have.body)
		}
	}
}
