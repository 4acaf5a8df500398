package health_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/health"
)

func TestPprof(t *testing.T) {
	srv := serve(t, health.NewHandler(&source{}, health.WithPprof()))
	pc := reflect.ValueOf(TestPprof).Pointer()
	tests := []struct {
		path     string
		wantCode int
		wantType string
		want     func(body string) bool
	}{
		{"/debug/pprof/", 200, "text/html; charset=utf-8", func(b string) bool { return strings.Contains(b, "goroutine?debug=1") }},
		{"/debug/pprof", 200, "text/html; charset=utf-8", func(b string) bool { return strings.Contains(b, "goroutine?debug=1") }}, // redirected
		{"/debug/pprof/goroutine?debug=1", 200, "text/plain; charset=utf-8", func(b string) bool { return strings.HasPrefix(b, "goroutine profile: total ") }},
		{"/debug/pprof/heap?gc=1", 200, "application/octet-stream", gzipped},
		{"/debug/pprof/profile?seconds=1", 200, "application/octet-stream", gzipped},
		{"/debug/pprof/trace?seconds=0.1", 200, "application/octet-stream", func(b string) bool { return strings.HasPrefix(b, "go ") }},
		{"/debug/pprof/cmdline", 200, "text/plain; charset=utf-8", func(b string) bool { return strings.HasPrefix(b, os.Args[0]) }},
		{fmt.Sprintf("/debug/pprof/symbol?%#x", pc), 200, "text/plain; charset=utf-8", func(b string) bool {
			return b == fmt.Sprintf("num_symbols: 1\n%#x github.com/actorkube/controllermanager/health_test.TestPprof\n", pc)
		}},
		{"/debug/pprof/nope", 404, "text/plain; charset=utf-8", func(b string) bool { return b == "unknown profile \"nope\"; see /debug/pprof/\n" }},
		{"/debug/pprof/heap?seconds=5", 400, "text/plain; charset=utf-8", func(b string) bool { return strings.HasPrefix(b, "delta profiles (?seconds=) are not served here") }},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			have := get(t, srv, tt.path)
			if have.code != tt.wantCode || have.header.Get("Content-Type") != tt.wantType || !tt.want(have.body) {
				t.Errorf("want %d %s, have %d %s %.200q", tt.wantCode, tt.wantType, have.code, have.header.Get("Content-Type"), have.body)
			}
		})
	}
	if _, pattern := http.DefaultServeMux.Handler(&http.Request{Method: http.MethodGet, URL: mustURL(t, "/debug/pprof/")}); pattern != "" {
		t.Errorf("package health registered %q on http.DefaultServeMux", pattern)
	}
}

func gzipped(b string) bool { return strings.HasPrefix(b, "\x1f\x8b") }

// TestPprofRefusesDurationsPastTheWriteTimeout: one request must not hold
// the CPU profiler, or a trace, past the server's write timeout (the handler
// does not push the deadline back), as net/http/pprof refuses them.
func TestPprofRefusesDurationsPastTheWriteTimeout(t *testing.T) {
	srv := httptest.NewUnstartedServer(health.NewHandler(&source{}, health.WithPprof()))
	srv.Config.WriteTimeout = 2 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/debug/pprof/profile?seconds=5", 400, "profile duration 5s exceeds the server's WriteTimeout (2s)"},
		{"/debug/pprof/profile?seconds=2", 400, "profile duration 2s exceeds the server's WriteTimeout (2s)"},
		{"/debug/pprof/profile", 400, "profile duration 30s exceeds the server's WriteTimeout (2s)"}, // the default, 30s
		{"/debug/pprof/trace?seconds=3600", 400, "trace duration 1h0m0s exceeds the server's WriteTimeout (2s)"},
		{"/debug/pprof/profile?seconds=abc", 400, `invalid profile ?seconds="abc": want a positive number of seconds`},
		{"/debug/pprof/trace?seconds=-1", 400, `invalid trace ?seconds="-1": want a positive number of seconds`},
		{"/debug/pprof/trace?seconds=NaN", 400, `invalid trace ?seconds="NaN"`},
		{"/debug/pprof/trace?seconds=1e300", 400, `invalid trace ?seconds="1e300"`},
		{"/debug/pprof/trace?seconds=0.05", 200, "go "},
	}
	for _, tt := range tests {
		have := get(t, srv, tt.path)
		if have.code != tt.wantCode || !strings.Contains(have.body, tt.wantBody) {
			t.Errorf("%s: want %d with %q, have %d %.200q", tt.path, tt.wantCode, tt.wantBody, have.code, have.body)
		}
	}
}
