package health_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

const (
	timeout = 100 * time.Millisecond
	budget  = 150 * time.Millisecond // timeout plus the least margin, 50ms
	// slack is what a loaded machine under -race may add to the budget.
	slack = 750 * time.Millisecond
)

// answersInTime fails the test unless have came within the budget.
func answersInTime(t *testing.T, have response) {
	t.Helper()
	if have.elapsed > budget+slack {
		t.Errorf("answered in %s, want within %s (+%s slack)", have.elapsed, budget, slack)
	}
}

func TestHungCallsStillAnswerInTime(t *testing.T) {
	tests := []struct {
		name     string
		src      func(h *hang) health.Source
		opts     func(h *hang) []health.Option
		path     string
		accept   string
		wantCode int
		wantBody string
	}{
		{
			name: "GetHealth", path: "/healthz?verbose", wantCode: 500,
			src: func(h *hang) health.Source {
				return &source{health: func() []actors.HealthStatus { h.block(); return nil }}
			},
			wantBody: lines("[-]controllers failed: no answer from GetHealth within 150ms", "healthz check failed"),
		},
		{
			name: "GetHealth, JSON", path: "/healthz", accept: "application/json", wantCode: 500,
			src: func(h *hang) health.Source {
				return &source{health: func() []actors.HealthStatus { h.block(); return nil }}
			},
			wantBody: `{"healthy":false,"status":[],"checks":[{"name":"controllers","healthy":false,"message":"no answer from GetHealth within 150ms"}]}` + "\n",
		},
		{
			name: "GetReadiness", path: "/readyz?verbose", wantCode: 503,
			src: func(h *hang) health.Source {
				return &source{ready: func() error { h.block(); return nil }}
			},
			wantBody: lines("[-]manager failed: no answer from GetReadiness within 150ms", "readyz check failed"),
		},
		{
			name: "Status", path: "/healthz?verbose&exclude=controllers", wantCode: 500,
			src: func(h *hang) health.Source {
				m := newManager(source{})
				m.status = func(context.Context) (supervisor.Status, error) { h.block(); return supervisor.Status{}, nil }
				return m
			},
			wantBody: lines("[-]phase failed: no answer from the supervisor within 150ms", "[+]controllers excluded: ok", "healthz check failed"),
		},
		{
			name: "host check that ignores its context", path: "/readyz?verbose", wantCode: 503,
			src: func(*hang) health.Source { return &source{} },
			opts: func(h *hang) []health.Option {
				return []health.Option{health.WithReadyzCheck(health.Check("cache", func(*http.Request) error { h.block(); return nil }))}
			},
			wantBody: lines("[+]manager ok", "[-]cache failed: no answer within 100ms", "readyz check failed"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHang(t)
			var opts []health.Option
			if tt.opts != nil {
				opts = tt.opts(h)
			}
			srv := serve(t, health.NewHandler(tt.src(h), append(opts, health.WithTimeout(timeout))...))

			have := doAccept(t, srv, http.MethodGet, tt.path, tt.accept)
			answersInTime(t, have)
			if have.code != tt.wantCode || have.body != tt.wantBody {
				t.Errorf("want %d %q\nhave %d %q", tt.wantCode, tt.wantBody, have.code, have.body)
			}

			// A burst of probes while the call hangs: each answers in time,
			// and none starts another call.
			var wg sync.WaitGroup
			haves := make([]response, 8)
			for i := range haves {
				wg.Go(func() { haves[i] = get(t, srv, tt.path) })
			}
			wg.Wait()
			for _, have := range haves {
				answersInTime(t, have)
				if have.code != tt.wantCode {
					t.Errorf("during the hang: want %d, have %d %q", tt.wantCode, have.code, have.body)
				}
			}
			if calls := h.calls.Load(); calls != 1 {
				t.Errorf("the hung call was made %d times, want once", calls)
			}

			// Once it returns, the probe passes again (except where the
			// source answers nothing healthy).
			h.free()
			eventually(t, "the probe to pass", func() bool {
				return get(t, srv, tt.path).code == http.StatusOK
			})
		})
	}
}

func TestHostCheckOverdueIsNotCalledAgain(t *testing.T) {
	h := newHang(t)
	slow := health.Check("cache", func(*http.Request) error { h.block(); return nil })
	srv := serve(t, health.NewHandler(&source{}, health.WithTimeout(timeout), health.WithHealthzCheck(slow)))

	first := get(t, srv, "/healthz/cache")
	if want := "cache check failed: no answer within 100ms\n"; first.body != want {
		t.Errorf("first probe: want %q, have %q", want, first.body)
	}
	second := get(t, srv, "/healthz/cache")
	if want := "cache check failed: an earlier call has not returned yet, past its 100ms deadline\n"; second.body != want {
		t.Errorf("second probe: want %q, have %q", want, second.body)
	}
	answersInTime(t, first)
	answersInTime(t, second)
	h.free()
	eventually(t, "the check to pass once it returns", func() bool { return get(t, srv, "/healthz/cache").code == http.StatusOK })
}

// TestHostCheckSeesItsDeadline: a check that honours its context gets a
// deadline, and the probe reports the check's own error when it returns at
// that deadline, within the request's budget. It runs in a synctest
// bubble, on the handler itself: the check's deadline (100ms) and the
// request's budget (150ms) are fake time, so a loaded machine cannot delay
// the check's return past the budget, as it did over real HTTP (the
// loaded suite saw "no answer within 100ms").
func TestHostCheckSeesItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		polite := health.Check("db", func(r *http.Request) error {
			if _, ok := r.Context().Deadline(); !ok {
				t.Error("the check's context has no deadline")
			}
			<-r.Context().Done()
			return r.Context().Err()
		})
		h := health.NewHandler(&source{}, health.WithTimeout(timeout), health.WithReadyzCheck(polite))
		for range 3 { // each call returns at its deadline, so each probe calls it again
			rec := httptest.NewRecorder()
			began := time.Now()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz/db", nil))
			if took := time.Since(began); took != timeout {
				t.Errorf("answered after %s, want at the check's deadline, %s", took, timeout)
			}
			if want := "db check failed: context deadline exceeded\n"; rec.Code != 503 || rec.Body.String() != want {
				t.Errorf("want 503 %q, have %d %q", want, rec.Code, rec.Body.String())
			}
		}
	})
}

func TestChecksRunConcurrently(t *testing.T) {
	// Each check waits for the other to have started: run one after the
	// other, both would time out.
	var started sync.WaitGroup
	started.Add(2)
	meet := func(r *http.Request) error {
		started.Done()
		done := make(chan struct{})
		go func() { started.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
	src := &source{health: healthy("jobs")}
	srv := serve(t, health.NewHandler(src, health.WithTimeout(wait),
		health.WithHealthzCheck(health.Check("a", meet), health.Check("b", meet))))
	have := get(t, srv, "/healthz?verbose")
	if want := lines("[+]controller/jobs ok", "[+]a ok", "[+]b ok", "healthz check passed"); have.body != want {
		t.Errorf("want %q, have %q", want, have.body)
	}
}

func TestClientGoneDuringHang(t *testing.T) {
	h := newHang(t)
	src := &source{health: func() []actors.HealthStatus { h.block(); return nil }}
	srv := serve(t, health.NewHandler(src, health.WithTimeout(wait)))
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(wait); h.calls.Load() == 0 && time.Now().Before(deadline); {
			<-tick.C
		}
	}()
	_, err = srv.Client().Do(req)
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("want the request cancelled, have %v", err)
	}
	// The handler returns without waiting out its budget: srv.Close, in
	// Cleanup, would otherwise block for it.
}
