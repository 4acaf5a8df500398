package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

// mixed has one healthy and one unhealthy controller.
func mixed() []actors.HealthStatus {
	return []actors.HealthStatus{{Name: "jobs", Healthy: true}, {Name: "cron", Message: "informer not synced"}}
}

func notReady() error { return errors.New("not ready: pre-flight running") }

func TestEndpoints(t *testing.T) {
	failing := health.Check("informers", func(*http.Request) error { return errors.New("cache stale") })
	passing := health.Check("informers", func(*http.Request) error { return nil })
	panicking := health.Check("disk", func(*http.Request) error { panic("oops") })
	watchdog := health.Check("leaderElection", func(*http.Request) error { return errors.New("renewal overdue by 20s") })

	tests := []struct {
		name     string
		src      health.Source
		opts     []health.Option
		method   string // default GET
		path     string
		accept   string // the Accept header; default application/json with wantJSON, none otherwise
		wantCode int
		wantBody string // exact, unless wantJSON
		wantJSON *health.Report
		wantType string // Content-Type; default text/plain; charset=utf-8
	}{
		// /readyz
		{name: "readyz ready", src: &source{}, path: "/readyz", wantCode: 200, wantBody: "ok"},
		{name: "readyz trailing slash", src: &source{}, path: "/readyz/", wantCode: 200, wantBody: "ok"},
		{name: "readyz not ready withholds the reason", src: &source{ready: notReady}, path: "/readyz", wantCode: 503,
			wantBody: lines("[-]manager failed: reason withheld", "readyz check failed")},
		{name: "readyz not ready, verbose, gives the reason", src: &source{ready: notReady}, path: "/readyz?verbose", wantCode: 503,
			wantBody: lines("[-]manager failed: not ready: pre-flight running", "readyz check failed")},
		{name: "readyz not ready, JSON", src: &source{ready: notReady}, path: "/readyz", wantCode: 503,
			wantJSON: &health.Report{Status: []actors.HealthStatus{}, Checks: []actors.HealthStatus{{Name: "manager", Message: "not ready: pre-flight running"}}}},
		{name: "readyz verbose", src: &source{}, path: "/readyz?verbose", wantCode: 200,
			wantBody: lines("[+]manager ok", "readyz check passed")},
		{name: "readyz verbose=true", src: &source{}, path: "/readyz?verbose=true", wantCode: 200,
			wantBody: lines("[+]manager ok", "readyz check passed")},
		{name: "readyz host check fails", src: &source{}, opts: []health.Option{health.WithReadyzCheck(failing)}, path: "/readyz", wantCode: 503,
			wantBody: lines("[+]manager ok", "[-]informers failed: reason withheld", "readyz check failed")},
		{name: "readyz host check passes", src: &source{}, opts: []health.Option{health.WithReadyzCheck(passing)}, path: "/readyz?verbose", wantCode: 200,
			wantBody: lines("[+]manager ok", "[+]informers ok", "readyz check passed")},
		{name: "readyz exclude", src: &source{ready: notReady}, opts: []health.Option{health.WithReadyzCheck(passing)}, path: "/readyz?exclude=manager&verbose", wantCode: 200,
			wantBody: lines("[+]manager excluded: ok", "[+]informers ok", "readyz check passed")},
		{name: "readyz exclude unknown warns", src: &source{}, path: "/readyz?verbose&exclude=nope&exclude=manager&exclude=nope2", wantCode: 200,
			wantBody: lines("[+]manager excluded: ok", `warn: some health checks cannot be excluded: no matches for "nope","nope2"`, "readyz check passed")},
		{name: "readyz one check", src: &source{}, path: "/readyz/manager", wantCode: 200, wantBody: "ok"},
		{name: "readyz one check fails", src: &source{ready: notReady}, path: "/readyz/manager", wantCode: 503,
			wantBody: "manager check failed: not ready: pre-flight running\n"},
		{name: "readyz healthz checks are not readyz checks", src: &source{}, opts: []health.Option{health.WithHealthzCheck(failing)}, path: "/readyz/informers", wantCode: 404,
			wantBody: "unknown readyz check \"informers\"; the checks are: manager\n"},
		{name: "readyz HEAD", src: &source{}, method: http.MethodHead, path: "/readyz", wantCode: 200, wantBody: ""},
		{name: "readyz POST", src: &source{}, method: http.MethodPost, path: "/readyz", wantCode: 405,
			wantBody: "method POST not allowed on /readyz: use GET or HEAD\n"},

		// /healthz, plain
		{name: "healthz passes", src: newManager(source{health: healthy("jobs", "cron")}), path: "/healthz", wantCode: 200, wantBody: "ok"},
		{name: "healthz fails: the listing, reasons withheld", src: newManager(source{health: mixed}), path: "/healthz", wantCode: 500,
			wantBody: lines("[+]phase ok", "[+]controller/jobs ok", "[-]controller/cron failed: reason withheld", "healthz check failed")},
		{name: "healthz fails, excluded checks listed", src: newManager(source{health: mixed}), path: "/healthz?exclude=phase&exclude=controller/jobs", wantCode: 500,
			wantBody: lines("[+]phase excluded: ok", "[+]controller/jobs excluded: ok", "[-]controller/cron failed: reason withheld", "healthz check failed")},
		{name: "healthz passes once the failing check is excluded", src: newManager(source{health: mixed}), path: "/healthz?exclude=controller/cron", wantCode: 200, wantBody: "ok"},

		// /healthz, JSON
		{name: "healthz empty", src: &source{}, path: "/healthz", wantCode: 200,
			wantJSON: &health.Report{Healthy: true, Status: []actors.HealthStatus{}}},
		{name: "healthz JSON among other media types", src: &source{}, path: "/healthz", accept: "text/html;q=0.9, Application/JSON;q=0.8", wantCode: 200,
			wantJSON: &health.Report{Healthy: true, Status: []actors.HealthStatus{}}},
		{name: "healthz JSON wins over verbose", src: &source{health: mixed}, path: "/healthz?verbose", wantCode: 500,
			wantJSON: &health.Report{Status: mixed()}},
		{name: "healthz text for any other media type", src: &source{}, path: "/healthz", accept: "application/jsonl, */*", wantCode: 200, wantBody: "ok"},
		{name: "healthz healthy", src: newManager(source{health: healthy("jobs", "cron")}), path: "/healthz", wantCode: 200,
			wantJSON: &health.Report{Healthy: true,
				Status: []actors.HealthStatus{{Name: "jobs", Healthy: true}, {Name: "cron", Healthy: true}},
				Checks: []actors.HealthStatus{{Name: "phase", Healthy: true, Message: "Running"}}}},
		{name: "healthz unhealthy controller", src: &source{health: mixed}, path: "/healthz", wantCode: 500,
			wantJSON: &health.Report{Status: mixed()}},
		{name: "healthz exclude the unhealthy controller", src: &source{health: mixed}, path: "/healthz?exclude=controller/cron", wantCode: 200,
			wantJSON: &health.Report{Healthy: true, Status: mixed()[:1]}},
		{name: "healthz exclude every controller", src: &source{health: mixed}, path: "/healthz?exclude=controllers", wantCode: 200,
			wantJSON: &health.Report{Healthy: true, Status: []actors.HealthStatus{}}},
		{name: "healthz unhealthy without a message", src: &source{health: func() []actors.HealthStatus { return []actors.HealthStatus{{Name: "jobs"}} }}, path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[-]controller/jobs failed: unhealthy", "healthz check failed")},

		// /healthz, verbose
		{name: "healthz verbose", src: newManager(source{health: mixed}), path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[+]phase ok", "[+]controller/jobs ok", "[-]controller/cron failed: informer not synced", "healthz check failed")},
		{name: "healthz verbose exclude repeated", src: newManager(source{health: mixed}), path: "/healthz?verbose&exclude=controller/cron&exclude=phase", wantCode: 200,
			wantBody: lines("[+]phase excluded: ok", "[+]controller/jobs ok", "[+]controller/cron excluded: ok", "healthz check passed")},
		{name: "healthz verbose exclude every controller", src: newManager(source{health: mixed}), path: "/healthz?verbose&exclude=controllers", wantCode: 200,
			wantBody: lines("[+]phase ok", "[+]controllers excluded: ok", "healthz check passed")},
		{name: "healthz verbose exclude unknown", src: &source{health: healthy("jobs")}, path: "/healthz?verbose&exclude=controller/nope", wantCode: 200,
			wantBody: lines("[+]controller/jobs ok", `warn: some health checks cannot be excluded: no matches for "controller/nope"`, "healthz check passed")},
		{name: "healthz host checks, in order, after the built-in ones", src: newManager(source{health: healthy("jobs")}),
			opts: []health.Option{health.WithHealthzCheck(passing, panicking)}, path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[+]phase ok", "[+]controller/jobs ok", "[+]informers ok", "[-]disk failed: check panicked: oops", "healthz check failed")},
		{name: "healthz host check in JSON", src: &source{}, opts: []health.Option{health.WithHealthzCheck(failing)}, path: "/healthz", wantCode: 500,
			wantJSON: &health.Report{Status: []actors.HealthStatus{}, Checks: []actors.HealthStatus{{Name: "informers", Message: "cache stale"}}}},
		{name: "healthz the source's checks (lease watchdog)", src: func() health.Source {
			m := newManager(source{health: healthy("jobs")})
			m.checks = []health.Checker{watchdog, health.Check("phase", nil), health.Check("leaderElection", nil)} // misnamed and duplicate: ignored
			return m
		}(), path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[+]phase ok", "[+]controller/jobs ok", "[-]leaderElection failed: renewal overdue by 20s", "healthz check failed")},

		// /healthz, the manager's phase
		{name: "healthz stopped on request", src: newManager(source{}).stopped(nil), path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[-]phase failed: manager stopped", "healthz check failed")},
		{name: "healthz escalated", src: newManager(source{}).stopped(errors.New(`supervisor: controller "cron" failed 6 times`)), path: "/healthz", wantCode: 500,
			wantJSON: &health.Report{Status: []actors.HealthStatus{}, Checks: []actors.HealthStatus{{Name: "phase", Message: `manager failed: supervisor: controller "cron" failed 6 times`}}}},
		{name: "healthz phase Failed", src: withStatus(supervisor.Status{Phase: supervisor.PhaseFailed, Err: errBoom}), path: "/healthz/phase", wantCode: 500,
			wantBody: "phase check failed: manager failed: boom\n"},
		{name: "healthz phase Stopped", src: withStatus(supervisor.Status{Phase: supervisor.PhaseStopped}), path: "/healthz/phase", wantCode: 500,
			wantBody: "phase check failed: manager stopped\n"},
		{name: "healthz phase ShuttingDown is alive", src: withStatus(supervisor.Status{Phase: supervisor.PhaseShuttingDown}), path: "/healthz/phase", wantCode: 200, wantBody: "ok"},
		{name: "healthz supervisor does not answer", src: func() health.Source {
			m := newManager(source{})
			m.status = func(ctx context.Context) (supervisor.Status, error) {
				return supervisor.Status{}, fmt.Errorf("GetStatus: %w", context.DeadlineExceeded)
			}
			return m
		}(), path: "/healthz?verbose", wantCode: 500,
			wantBody: lines("[-]phase failed: the supervisor did not answer: GetStatus: context deadline exceeded", "healthz check failed")},

		// /healthz, one check
		{name: "healthz one controller", src: &source{health: mixed}, path: "/healthz/controller/jobs", wantCode: 200, wantBody: "ok"},
		{name: "healthz one unhealthy controller", src: &source{health: mixed}, path: "/healthz/controller/cron", wantCode: 500,
			wantBody: "controller/cron check failed: informer not synced\n"},
		{name: "healthz every controller", src: &source{health: mixed}, path: "/healthz/controllers", wantCode: 500,
			wantBody: "controllers check failed: controller/cron: informer not synced\n"},
		{name: "healthz one host check", src: &source{}, opts: []health.Option{health.WithHealthzCheck(failing)}, path: "/healthz/informers", wantCode: 500,
			wantBody: "informers check failed: cache stale\n"},
		{name: "healthz unknown controller", src: newManager(source{health: mixed}), path: "/healthz/controller/nope", wantCode: 404,
			wantBody: "unknown healthz check \"controller/nope\"; the checks are: phase, controllers, controller/jobs, controller/cron\n"},
		{name: "healthz unknown check", src: &source{}, path: "/healthz/nope", wantCode: 404,
			wantBody: "unknown healthz check \"nope\"; the checks are: controllers\n"},
		{name: "healthz DELETE", src: &source{}, method: http.MethodDelete, path: "/healthz/controllers", wantCode: 405,
			wantBody: "method DELETE not allowed on /healthz: use GET or HEAD\n"},

		// /livez
		{name: "livez passes", src: newManager(source{health: mixed}), path: "/livez", wantCode: 200, wantBody: "ok"},
		{name: "livez verbose: ping, phase, the source's checks, the host's; no controllers", src: func() health.Source {
			m := newManager(source{health: mixed})
			m.checks = []health.Checker{passing}
			return m
		}(), opts: []health.Option{health.WithLivezCheck(health.Check("deadlock", func(*http.Request) error { return nil })), health.WithHealthzCheck(failing)},
			path: "/livez?verbose", wantCode: 200,
			wantBody: lines("[+]ping ok", "[+]phase ok", "[+]informers ok", "[+]deadlock ok", "livez check passed")},
		{name: "livez plain source: ping only", src: &source{health: mixed}, path: "/livez?verbose", wantCode: 200,
			wantBody: lines("[+]ping ok", "livez check passed")},
		{name: "livez fails once the manager has stopped", src: newManager(source{}).stopped(errBoom), path: "/livez", wantCode: 500,
			wantBody: lines("[+]ping ok", "[-]phase failed: reason withheld", "livez check failed")},
		{name: "livez fails: the lease watchdog", src: func() health.Source {
			m := newManager(source{})
			m.checks = []health.Checker{watchdog}
			return m
		}(), path: "/livez?verbose", wantCode: 500,
			wantBody: lines("[+]ping ok", "[+]phase ok", "[-]leaderElection failed: renewal overdue by 20s", "livez check failed")},
		{name: "livez exclude", src: newManager(source{}).stopped(errBoom), path: "/livez?exclude=phase", wantCode: 200, wantBody: "ok"},
		{name: "livez one check", src: newManager(source{}), path: "/livez/ping", wantCode: 200, wantBody: "ok"},
		{name: "livez one failing check", src: newManager(source{}).stopped(errBoom), path: "/livez/phase", wantCode: 500,
			wantBody: "phase check failed: manager failed: boom\n"},
		{name: "livez has no controllers' checks", src: &source{health: mixed}, path: "/livez/controller/jobs", wantCode: 404,
			wantBody: "unknown livez check \"controller/jobs\"; the checks are: ping\n"},
		{name: "livez JSON", src: newManager(source{}), path: "/livez", wantCode: 200,
			wantJSON: &health.Report{Healthy: true, Status: []actors.HealthStatus{}, Checks: []actors.HealthStatus{{Name: "ping", Healthy: true}, {Name: "phase", Healthy: true, Message: "Running"}}}},
		{name: "livez POST", src: &source{}, method: http.MethodPost, path: "/livez", wantCode: 405,
			wantBody: "method POST not allowed on /livez: use GET or HEAD\n"},

		// elsewhere
		{name: "unknown path", src: &source{}, path: "/livezz", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "no metrics unless asked", src: &source{}, path: "/metrics", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "no pprof unless asked", src: &source{}, path: "/debug/pprof/", wantCode: 404, wantBody: "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := serve(t, health.NewHandler(tt.src, tt.opts...))
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			accept := tt.accept
			if accept == "" && tt.wantJSON != nil {
				accept = "application/json"
			}
			have := doAccept(t, srv, method, tt.path, accept)
			if have.code != tt.wantCode {
				t.Errorf("status: want %d, have %d (body %q)", tt.wantCode, have.code, have.body)
			}
			wantType := "text/plain; charset=utf-8"
			if tt.wantJSON != nil {
				wantType = "application/json"
				var rep health.Report
				if err := json.Unmarshal([]byte(have.body), &rep); err != nil {
					t.Fatalf("body is not a Report: %v: %q", err, have.body)
				}
				if want, haveJSON := mustJSON(t, tt.wantJSON), mustJSON(t, rep); want != haveJSON {
					t.Errorf("report:\nwant %s\nhave %s", want, haveJSON)
				}
			} else if have.body != tt.wantBody {
				t.Errorf("body:\nwant %q\nhave %q", tt.wantBody, have.body)
			}
			if haveType := have.header.Get("Content-Type"); haveType != wantType {
				t.Errorf("Content-Type: want %q, have %q", wantType, haveType)
			}
		})
	}
}

func withStatus(st supervisor.Status) *manager {
	m := newManager(source{})
	m.status = func(context.Context) (supervisor.Status, error) { return st, nil }
	return m
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNewHandlerRejectsBadChecks(t *testing.T) {
	ok := func(*http.Request) error { return nil }
	tests := []struct {
		name string
		opts []health.Option
		want string // in the panic
	}{
		{"empty name", []health.Option{health.WithHealthzCheck(health.Check("", ok))}, "empty check name"},
		{"built-in name", []health.Option{health.WithHealthzCheck(health.Check("phase", ok))}, `check name "phase" is reserved`},
		{"controller prefix", []health.Option{health.WithReadyzCheck(health.Check("controller/x", ok))}, `the prefix "controller/" is reserved`},
		{"space", []health.Option{health.WithHealthzCheck(health.Check("a b", ok))}, "contains a space"},
		{"ping on livez", []health.Option{health.WithLivezCheck(health.Check("ping", ok))}, `WithLivezCheck: check name "ping" is reserved`},
		{"duplicate on livez", []health.Option{health.WithLivezCheck(health.Check("db", ok), health.Check("db", ok))}, `WithLivezCheck: check name "db" is used twice`},
		{"duplicate", []health.Option{health.WithReadyzCheck(health.Check("db", ok)), health.WithReadyzCheck(health.Check("db", ok))}, `WithReadyzCheck: check name "db" is used twice`},
		{"nil check", []health.Option{health.WithHealthzCheck(nil)}, "WithHealthzCheck: check #0 is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				have := fmt.Sprint(recover())
				if !strings.Contains(have, tt.want) {
					t.Errorf("panic: want it to contain %q, have %q", tt.want, have)
				}
			}()
			health.NewHandler(&source{}, tt.opts...)
		})
	}
	t.Run("nil source", func(t *testing.T) {
		defer func() {
			if have := fmt.Sprint(recover()); have != "health: NewHandler: nil Source" {
				t.Errorf("panic: have %q", have)
			}
		}()
		health.NewHandler(nil)
	})
}

// A check's name is written into the one-line-per-check listing with its
// control characters escaped, any other character as it is. Before, a
// controller named "jobs ok\n[+]controller/cron ok\nhealthz check
// passed\n[+]x" made /healthz?verbose show a user a passing check and a
// passing verdict, forged, ahead of the real failure.
func TestTheHealthzListingKeepsEachCheckOnOneLine(t *testing.T) {
	evil := "jobs ok\n[+]controller/cron ok\nhealthz check passed\n[+]x"
	src := newManager(source{health: func() []actors.HealthStatus {
		return []actors.HealthStatus{
			{Name: evil, Message: "down"},
			{Name: "tab\there\x1b[0m\u0085", Healthy: true},
			{Name: "jöbs café", Healthy: true},
		}
	}})
	srv := serve(t, health.NewHandler(src))
	res := get(t, srv, "/healthz?verbose")
	if res.code != http.StatusInternalServerError {
		t.Fatalf("code %d: %s", res.code, res.body)
	}
	want := lines(
		"[+]phase ok",
		`[-]controller/jobs ok\n[+]controller/cron ok\nhealthz check passed\n[+]x failed: down`,
		`[+]controller/tab\there\x1b[0m\u0085 ok`,
		"[+]controller/jöbs café ok",
		"healthz check failed")
	if res.body != want {
		t.Errorf("listing:\n%s\nwant:\n%s", res.body, want)
	}
}

// /metrics takes GET and HEAD only, as the probes do: other methods get
// 405 with Allow: GET, HEAD (docs/observability.md). Before, a POST, PUT
// or DELETE to /metrics was answered 200 with the metrics.
func TestMetricsRefusesMethodsOtherThanGetAndHead(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := serve(t, health.NewHandler(newManager(source{}), health.WithMetrics(reg)))
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		res := do(t, srv, method, "/metrics")
		if res.code != http.StatusMethodNotAllowed {
			t.Errorf("%s /metrics: %d, want 405: %q", method, res.code, res.body)
		}
		if got := res.header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s /metrics: Allow %q, want \"GET, HEAD\"", method, got)
		}
		if want := "method " + method + " not allowed on /metrics: use GET or HEAD\n"; res.body != want {
			t.Errorf("%s /metrics: body %q, want %q", method, res.body, want)
		}
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if res := do(t, srv, method, "/metrics"); res.code != http.StatusOK {
			t.Errorf("%s /metrics: %d, want 200: %q", method, res.code, res.body)
		}
	}
}
