package controllermanager_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// Two ControllerManagers in one process (a test, a host running two):
// each one's /metrics answers 200 with its own children and not the
// other's, and both on one host registry, each under a label of its own
// (WithRegisterer), answer 200 together, told apart by the label.
func TestMetricsOfTwoManagersInOneProcess(t *testing.T) {
	host := prometheus.NewRegistry()
	as := func(name string) cm.Option {
		return cm.WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{"manager": name}, host))
	}
	jobs := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, []cm.Controller{&metricsController{name: "jobs"}}, as("jobs"))
	cron := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{}, []cm.Controller{&metricsController{name: "cron"}}, as("cron"))

	scrape := func(t *testing.T, h http.Handler) string {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK {
			t.Fatalf("want 200, have %d: %s", rec.Code, body)
		}
		return string(body)
	}
	tests := []struct {
		name      string
		h         http.Handler
		want, not []string
	}{
		{"jobs' own", health.NewHandler(jobs, health.WithMetrics(jobs.Gatherer())),
			[]string{`controllermanager_child_healthy{child="jobs",kind="controller"} 1`}, []string{`child="cron"`, `manager=`}},
		{"cron's own", health.NewHandler(cron, health.WithMetrics(cron.Gatherer())),
			[]string{`controllermanager_child_healthy{child="cron",kind="controller"} 1`}, []string{`child="jobs"`, `manager=`}},
		{"both on the host registry", health.MetricsHandler(host),
			[]string{`controllermanager_child_healthy{child="jobs",kind="controller",manager="jobs"} 1`,
				`controllermanager_child_healthy{child="cron",kind="controller",manager="cron"} 1`,
				`controllermanager_phase{manager="jobs",phase="Running"} 1`, `controllermanager_phase{manager="cron",phase="Running"} 1`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := scrape(t, tt.h)
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("want %s", w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(body, n) {
					t.Errorf("want no %s", n)
				}
			}
		})
	}
}
