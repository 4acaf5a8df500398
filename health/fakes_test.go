package health_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

// wait bounds anything that should happen promptly.
const wait = 10 * time.Second

// source is a health.Source and nothing more: its calls answer what its
// fields say; a nil field is ready, or healthy with no controllers.
type source struct {
	ready  func() error
	health func() []actors.HealthStatus
}

func (s *source) GetReadiness() error {
	if s.ready == nil {
		return nil
	}
	return s.ready()
}

func (s *source) GetHealth() []actors.HealthStatus {
	if s.health == nil {
		return []actors.HealthStatus{}
	}
	return s.health()
}

// manager is a source with every optional interface of a manager.
type manager struct {
	source
	done    chan struct{}
	err     error
	status  func(ctx context.Context) (supervisor.Status, error)
	timeout time.Duration
	checks  []health.Checker
}

func newManager(s source) *manager {
	return &manager{source: s, done: make(chan struct{})}
}

func (m *manager) Done() <-chan struct{} { return m.done }
func (m *manager) Err() error            { return m.err }
func (m *manager) HealthTimeout() time.Duration {
	return m.timeout
}
func (m *manager) HealthzChecks() []health.Checker { return m.checks }
func (m *manager) Status(ctx context.Context) (supervisor.Status, error) {
	if m.status == nil {
		return supervisor.Status{Phase: supervisor.PhaseRunning}, nil
	}
	return m.status(ctx)
}

// stopped returns m once stopped with err.
func (m *manager) stopped(err error) *manager {
	m.err = err
	close(m.done)
	return m
}

var (
	_ health.Stopper       = (*manager)(nil)
	_ health.StatusSource  = (*manager)(nil)
	_ health.TimeoutSource = (*manager)(nil)
	_ health.CheckProvider = (*manager)(nil)
)

func healthy(names ...string) func() []actors.HealthStatus {
	return func() []actors.HealthStatus {
		out := make([]actors.HealthStatus, len(names))
		for i, n := range names {
			out[i] = actors.HealthStatus{Name: n, Healthy: true}
		}
		return out
	}
}

// hang is a call that blocks until released; it counts its calls.
type hang struct {
	release chan struct{}
	once    sync.Once
	calls   atomic.Int32
}

func newHang(t *testing.T) *hang {
	h := &hang{release: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

func (h *hang) free() { h.once.Do(func() { close(h.release) }) }

func (h *hang) block() {
	h.calls.Add(1)
	<-h.release
}

// serve serves handler over real HTTP for the test.
func serve(t *testing.T, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// response is what a request got.
type response struct {
	code    int
	body    string
	header  http.Header
	elapsed time.Duration
}

func do(t *testing.T, srv *httptest.Server, method, path string) response {
	t.Helper()
	return doAccept(t, srv, method, path, "")
}

// doAccept is do with an Accept header, unless accept is empty.
func doAccept(t *testing.T, srv *httptest.Server, method, path, accept string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	began := time.Now()
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{code: res.StatusCode, body: string(body), header: res.Header, elapsed: time.Since(began)}
}

func get(t *testing.T, srv *httptest.Server, path string) response {
	t.Helper()
	return do(t, srv, http.MethodGet, path)
}

// eventually polls cond until it holds or wait has passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }

var errBoom = errors.New("boom")
