package controllermanager_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	cm "github.com/actorkube/controllermanager"
)

const metricsWait = 10 * time.Second

// metricsController is a controller whose failures the test reports.
type metricsController struct {
	name string

	mu     sync.Mutex
	report func(error)
}

func (c *metricsController) Name() string             { return c.name }
func (c *metricsController) Shutdown(context.Context) {}
func (c *metricsController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}
func (c *metricsController) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	return nil
}

func (c *metricsController) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(err)
}

// startMetricsManager starts a ControllerManager with controllers, shut
// down when the test ends.
func startMetricsManager(t *testing.T, host cm.Context, cfg cm.ControllerManagerConfigSpec, ctrls []cm.Controller, opts ...cm.Option) *cm.ControllerManager {
	t.Helper()
	opts = append([]cm.Option{cm.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	m, err := cm.NewControllerManager(host, cfg, "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	for _, c := range ctrls {
		m.Add(c)
	}
	if err := m.Start(context.Background(), metricsWait); err != nil {
		t.Fatal(err)
	}
	return m
}

// childMetrics are the metrics of the manager's children and phase.
var childMetrics = []string{
	"controllermanager_phase", "controllermanager_child_restarts_total",
	"controllermanager_child_failures_total", "controllermanager_child_healthy",
}

func TestMetricsFollowTheSupervisor(t *testing.T) {
	jobs, cron := &metricsController{name: "jobs"}, &metricsController{name: "cron"}
	m := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
		InitialBackoff: metav1Duration(time.Millisecond), HealthInterval: metav1Duration(time.Hour),
	}}, []cm.Controller{jobs, cron})

	restarted := make(chan struct{})
	cancel := m.Subscribe(func(e cm.Event) {
		if e.Type == cm.ChildStarted && e.Child == "cron" && e.Restarts == 1 {
			close(restarted)
		}
	})
	defer cancel()
	cron.fail(errors.New("watch closed"))
	select {
	case <-restarted:
	case <-time.After(metricsWait):
		t.Fatal("cron was not restarted")
	}

	want := `
# HELP controllermanager_child_failures_total Failures of a child: an error or panic in its user calls, a failure its background work reported, or too many unhealthy probes in a row.
# TYPE controllermanager_child_failures_total counter
controllermanager_child_failures_total{child="cron",kind="controller"} 1
controllermanager_child_failures_total{child="jobs",kind="controller"} 0
# HELP controllermanager_child_healthy Whether the supervisor counts a child healthy (1) or not (0): its last liveness probe, and 0 from a failure until it has started again.
# TYPE controllermanager_child_healthy gauge
controllermanager_child_healthy{child="cron",kind="controller"} 1
controllermanager_child_healthy{child="jobs",kind="controller"} 1
# HELP controllermanager_child_restarts_total Times a child's start call ran after its first: after a failure, a RestartChild or a StartChild.
# TYPE controllermanager_child_restarts_total counter
controllermanager_child_restarts_total{child="cron",kind="controller"} 1
controllermanager_child_restarts_total{child="jobs",kind="controller"} 0
# HELP controllermanager_phase The manager's phase: 1 for the phase it is in, 0 for every other.
# TYPE controllermanager_phase gauge
controllermanager_phase{phase="Electing"} 0
controllermanager_phase{phase="Failed"} 0
controllermanager_phase{phase="Idle"} 0
controllermanager_phase{phase="Initializing"} 0
controllermanager_phase{phase="Recovering"} 0
controllermanager_phase{phase="Running"} 1
controllermanager_phase{phase="ShuttingDown"} 0
controllermanager_phase{phase="Starting"} 0
controllermanager_phase{phase="Stopped"} 0
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), childMetrics...); err != nil {
		t.Error(err)
	}
	if n := seriesCount(t, m.Gatherer(), "controllermanager_leader"); n != 0 {
		t.Errorf("with election off, want no controllermanager_leader, have %d series", n)
	}

	// The final phase stays visible once the manager has stopped.
	ctx, cancelShutdown := context.WithTimeout(context.Background(), metricsWait)
	defer cancelShutdown()
	m.ShutdownAndWait(ctx)
	if have := phases(t, m.Gatherer())[""]; have != "Stopped" {
		t.Errorf("after shutdown: want phase Stopped, have %q", have)
	}
}

func TestMetricsProbeDuration(t *testing.T) {
	m := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, []cm.Controller{&metricsController{name: "jobs"}})
	for range 3 {
		m.GetHealth()
	}
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "controllermanager_health_probe_duration_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() <= 0 {
				t.Errorf("want 3 observations summing to more than 0, have %d summing to %g", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Error("no controllermanager_health_probe_duration_seconds")
}

func TestMetricsLeader(t *testing.T) {
	enabled := true
	cfg := cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{Enabled: &enabled, LeaseName: "jobs-controller", LeaseNamespace: "jobs"}}
	m := startMetricsManager(t, cm.NewContext(fake.NewClientset()), cfg, nil, cm.WithIdentity("replica-a"))
	want := `
# HELP controllermanager_leader Whether this replica holds the leader-election lease (1) or not (0). Present only with leader election on.
# TYPE controllermanager_leader gauge
controllermanager_leader{identity="replica-a",lease="jobs-controller"} 1
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "controllermanager_leader"); err != nil {
		t.Error(err)
	}
}

func TestMetricsRegisterer(t *testing.T) {
	host := prometheus.NewRegistry()
	as := func(name string) cm.Option {
		return cm.WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"manager": name}, host))
	}
	controllers := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, nil, as("controllers"))
	webhooks := cm.NewWebhookManager(nil, as("webhooks"), cm.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { webhooks.ShutdownAndWait(context.Background()) })

	// A third manager with no label of its own collides, and says so.
	var logs bytes.Buffer
	startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, nil, cm.WithRegisterer(host), cm.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if !strings.Contains(logs.String(), "cannot register the manager's metrics") {
		t.Errorf("want the collision logged, have %q", logs.String())
	}

	tests := []struct {
		name string
		g    prometheus.Gatherer
		want map[string]string // manager label → phase
	}{
		{"host registry", host, map[string]string{"controllers": "Running", "webhooks": "Idle"}},
		{"controllers' own", controllers.Gatherer(), map[string]string{"": "Running"}},
		{"webhooks' own", webhooks.Gatherer(), map[string]string{"": "Idle"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if have := phases(t, tt.g); !maps.Equal(have, tt.want) {
				t.Errorf("want %v, have %v", tt.want, have)
			}
		})
	}
}

func TestMetricsNeverTouchTheGlobalRegistry(t *testing.T) {
	startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, []cm.Controller{&metricsController{name: "jobs"}})
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "controllermanager_") {
			t.Errorf("%s is on the global registry", f.GetName())
		}
	}
}

// phases returns the phase of each manager g reports, by its "manager"
// label.
func phases(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range families {
		if f.GetName() != "controllermanager_phase" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if m.GetGauge().GetValue() == 1 {
				out[labels["manager"]] = labels["phase"]
			}
		}
	}
	return out
}

// seriesCount counts the series of the metric named name that g gathers.
func seriesCount(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func metav1Duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
