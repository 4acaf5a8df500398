package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// admSeries is the value of the series of family name with labels, and
// whether there is one.
func admSeries(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestWebhookMetricsCountRequestsByPathAndCode: the controller-runtime
// metrics count every request routed to a webhook, by its path and the
// status answered, on the manager's own registry.
func TestWebhookMetricsCountRequestsByPathAndCode(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	g := f.mgr.Gatherer()

	// Before any request, the likely codes are at zero, as with
	// controller-runtime (the route is made by the first request, so make one
	// that is not counted under the codes checked).
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if v, ok := admSeries(t, g, "controller_runtime_webhook_requests_total", map[string]string{"webhook": "/validate", "code": "500"}); !ok || v != 0 {
		t.Errorf("code 500: have %v (present %v), want 0 present", v, ok)
	}
	for range 2 {
		f.post(t, "/validate", v1)
	}
	hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		return nil, errors.New("failing")
	})
	f.post(t, "/validate", v1).wantDenial(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", 500, "failing")
	hook.setHandle(nil)
	if r := admDo(t, f.srv.Client(), http.MethodGet, f.srv.URL+"/validate", nil); r.code != 405 {
		t.Fatalf("GET: have %d", r.code)
	}
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/validate", strings.NewReader(string(v1)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("text/plain: have %d", resp.StatusCode)
	}
	for range 3 { // not served: not counted, whatever the path
		if r := f.post(t, "/attacker-chosen", v1); r.code != 404 {
			t.Fatalf("unknown path: have %d", r.code)
		}
	}

	for _, tt := range []struct {
		code string
		want float64
	}{{"200", 4}, {"405", 1}, {"415", 1}, {"500", 0}} {
		if v, _ := admSeries(t, g, "controller_runtime_webhook_requests_total", map[string]string{"webhook": "/validate", "code": tt.code}); v != tt.want {
			t.Errorf("requests_total{code=%s}: have %v, want %v", tt.code, v, tt.want)
		}
	}
	if v, _ := admSeries(t, g, "controller_runtime_webhook_latency_seconds", map[string]string{"webhook": "/validate"}); v != 6 {
		t.Errorf("latency_seconds count: have %v, want 6", v)
	}
	if v, ok := admSeries(t, g, "controller_runtime_webhook_requests_in_flight", map[string]string{"webhook": "/validate"}); !ok || v != 0 {
		t.Errorf("requests_in_flight: have %v (present %v), want 0", v, ok)
	}
	for _, name := range []string{"controller_runtime_webhook_requests_total", "controller_runtime_webhook_latency_seconds", "controller_runtime_webhook_requests_in_flight"} {
		if _, ok := admSeries(t, g, name, map[string]string{"webhook": "/attacker-chosen"}); ok {
			t.Errorf("%s has a series for a path no webhook serves", name)
		}
	}
	// The labels are exactly controller-runtime's.
	const want = `
# HELP controller_runtime_webhook_requests_in_flight Current number of admission requests being served.
# TYPE controller_runtime_webhook_requests_in_flight gauge
controller_runtime_webhook_requests_in_flight{webhook="/validate"} 0
`
	if err := testutil.GatherAndCompare(g, strings.NewReader(want), "controller_runtime_webhook_requests_in_flight"); err != nil {
		t.Error(err)
	}
}

// TestWebhookMetricsInFlight: a request is in flight while its Handle runs.
func TestWebhookMetricsInFlight(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	hook.setHandle(func(ctx context.Context, _ *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	done := make(chan admReply, 2)
	for range 2 {
		go func() { done <- admDo(t, f.srv.Client(), http.MethodPost, f.srv.URL+"/validate?timeout=10s", v1) }()
	}
	deadline := time.After(admWait)
	for range 2 {
		select {
		case <-entered:
		case <-deadline:
			t.Fatal("Handle not called")
		}
	}
	if v, _ := admSeries(t, f.mgr.Gatherer(), "controller_runtime_webhook_requests_in_flight", map[string]string{"webhook": "/validate"}); v != 2 {
		t.Errorf("in flight while two Handle calls run: have %v, want 2", v)
	}
	close(release)
	for range 2 {
		if r := <-done; r.code != 200 {
			t.Errorf("have %d", r.code)
		}
	}
	if v, _ := admSeries(t, f.mgr.Gatherer(), "controller_runtime_webhook_requests_in_flight", map[string]string{"webhook": "/validate"}); v != 0 {
		t.Errorf("in flight after the answers: have %v, want 0", v)
	}
}

// TestWebhookMetricsOnTheRegistererNeverGlobal: the metrics go to the
// registry of WithRegisterer as well as the manager's own, and never to
// prometheus' global registry.
func TestWebhookMetricsOnTheRegistererNeverGlobal(t *testing.T) {
	reg := prometheus.NewRegistry()
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet, cm.WithRegisterer(reg))
	hook := newAdmHook("validate", "/validate")
	mgr.Add(hook)
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	srv := httptest.NewTLSServer(mgr.Handler())
	t.Cleanup(srv.Close)
	admDo(t, srv.Client(), http.MethodPost, srv.URL+"/validate", admBody(t, admV1)).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)

	labels := map[string]string{"webhook": "/validate", "code": "200"}
	for _, g := range []struct {
		name string
		g    prometheus.Gatherer
		want bool
	}{{"WithRegisterer's", reg, true}, {"the manager's own", mgr.Gatherer(), true}, {"the global", prometheus.DefaultGatherer, false}} {
		if v, ok := admSeries(t, g.g, "controller_runtime_webhook_requests_total", labels); ok != g.want || (ok && v != 1) {
			t.Errorf("%s registry: have %v (present %v), want present %v", g.name, v, ok, g.want)
		}
	}
}

// TestWebhookMetricsCountAbandonedHandles: a Handle that ignores its
// context and runs on past its request's end is counted as abandoned, a
// second after the request ended, on the manager's own registry and on
// WithRegisterer's; the gauge of abandoned calls still running falls back
// once it returns, and the counter stays. Before, nothing said how many
// calls were abandoned, though they hold MaxInFlight slots and, once they
// hold them all, restart the webhook.
func TestWebhookMetricsCountAbandonedHandles(t *testing.T) {
	reg := prometheus.NewRegistry()
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet, cm.WithRegisterer(reg))
	h := newHangingHook(t, "hung", 1)
	mgr.Add(h.admHook)
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.free()
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	srv := httptest.NewTLSServer(mgr.WebhookHandler(webhook.Config{FailureThreshold: -1}))
	t.Cleanup(srv.Close)

	const (
		total   = "controllermanager_webhook_handles_abandoned_total"
		running = "controllermanager_webhook_handles_abandoned_running"
	)
	path := map[string]string{"webhook": "/hung"}
	gatherers := []struct {
		name string
		g    prometheus.Gatherer
	}{{"the manager's own", mgr.Gatherer()}, {"WithRegisterer's", reg}}
	// want waits until every registry has value for the series of name.
	want := func(name string, value float64, why string) {
		t.Helper()
		for _, g := range gatherers {
			var have float64
			var ok bool
			require.Eventually(t, func() bool {
				have, ok = admSeries(t, g.g, name, path)
				return ok && have == value
			}, admWait, 10*time.Millisecond, "%s on %s registry: have %v (present %v), want %v: %s", name, g.name, have, ok, value, why)
		}
	}

	body := admBody(t, admV1)
	replied := make(chan admReply, 1)
	go func() { replied <- admDo(t, srv.Client(), http.MethodPost, srv.URL+"/hung?timeout=1s", body) }()
	select {
	case <-h.entered:
	case <-time.After(admWait):
		t.Fatal("Handle not called")
	}
	want(total, 0, "the series is there, at 0, once the path is served")
	(<-replied).wantDenial(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", 504, "did not answer")

	want(total, 1, "Handle still runs a second after its request ended")
	want(running, 1, "the abandoned Handle has not returned")
	h.free()
	want(running, 0, "the abandoned Handle has returned")
	want(total, 1, "a counter: the call was abandoned all the same")
	if _, ok := admSeries(t, prometheus.DefaultGatherer, total, path); ok {
		t.Errorf("%s is on the global registry", total)
	}
}

// TestWebhookAbandonMetricsBesideControllerRuntimes: on a registry where
// controller-runtime's webhook server has the controller_runtime_webhook_*
// names (its metrics.Registry), the manager cannot register its own under
// them, but its abandoned-calls metrics, a collector of their own, are
// registered all the same.
func TestWebhookAbandonMetricsBesideControllerRuntimes(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_webhook_requests_total",
		Help: "Total number of admission requests by HTTP status code.",
	}, []string{"webhook", "code"}))
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet, cm.WithRegisterer(reg))
	mgr.Add(newAdmHook("validate", "/validate"))
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	srv := httptest.NewTLSServer(mgr.Handler())
	t.Cleanup(srv.Close)
	admDo(t, srv.Client(), http.MethodPost, srv.URL+"/validate", admBody(t, admV1)).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)

	for _, name := range []string{"controllermanager_webhook_handles_abandoned_total", "controllermanager_webhook_handles_abandoned_running"} {
		if v, ok := admSeries(t, reg, name, map[string]string{"webhook": "/validate"}); !ok || v != 0 {
			t.Errorf("%s: have %v (present %v), want 0 present", name, v, ok)
		}
	}
}
