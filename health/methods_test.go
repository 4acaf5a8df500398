package health_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/actorkube/controllermanager/health"
)

// MetricsHandler served on its own takes the methods the served /metrics
// takes: GET and HEAD, other methods 405 with Allow: GET, HEAD. Found by a
// read: only NewHandler's /metrics refused them; MetricsHandler answered a
// DELETE with the metrics.
func TestMetricsHandlerRefusesMethodsOtherThanGetAndHead(t *testing.T) {
	srv := serve(t, health.MetricsHandler(prometheus.NewRegistry()))
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		res := do(t, srv, method, "/metrics")
		if res.code != http.StatusMethodNotAllowed {
			t.Errorf("%s /metrics: %d, want 405: %q", method, res.code, res.body)
		}
		if got := res.header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s /metrics: Allow %q, want \"GET, HEAD\"", method, got)
		}
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if res := do(t, srv, method, "/metrics"); res.code != http.StatusOK {
			t.Errorf("%s /metrics: %d, want 200: %q", method, res.code, res.body)
		}
	}
}

// /debug/pprof/ takes GET and HEAD, and /debug/pprof/symbol POST as well
// (go tool pprof POSTs the addresses it looks up there); any other method
// gets 405 with the Allow header of its path, as the probes and /metrics
// do. Found by a read: the docs said so, while pprof took every method.
func TestPprofRefusesMethodsItDoesNotServe(t *testing.T) {
	srv := serve(t, health.NewHandler(newManager(source{}), health.WithPprof()))
	refused := []struct{ method, path, allow string }{
		{http.MethodPost, "/debug/pprof/", "GET, HEAD"},
		{http.MethodDelete, "/debug/pprof/heap", "GET, HEAD"},
		{http.MethodPut, "/debug/pprof/cmdline", "GET, HEAD"},
		{http.MethodPost, "/debug/pprof/goroutine", "GET, HEAD"},
		{http.MethodPut, "/debug/pprof/symbol", "GET, HEAD, POST"},
		{http.MethodDelete, "/debug/pprof/symbol", "GET, HEAD, POST"},
	}
	for _, tt := range refused {
		res := do(t, srv, tt.method, tt.path)
		if res.code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405: %.80q", tt.method, tt.path, res.code, res.body)
		}
		if got := res.header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
	served := []struct{ method, path string }{
		{http.MethodGet, "/debug/pprof/"},
		{http.MethodHead, "/debug/pprof/heap"},
		{http.MethodGet, "/debug/pprof/symbol"},
		{http.MethodPost, "/debug/pprof/symbol"},
	}
	for _, tt := range served {
		res := do(t, srv, tt.method, tt.path)
		if res.code != http.StatusOK {
			t.Errorf("%s %s: %d, want 200: %.80q", tt.method, tt.path, res.code, res.body)
		}
		if tt.path == "/debug/pprof/symbol" && !strings.HasPrefix(res.body, "num_symbols: 1\n") {
			t.Errorf("%s %s: body %q", tt.method, tt.path, res.body)
		}
	}
}
