package liveview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
)

// wait bounds anything that should happen promptly.
const wait = 10 * time.Second

// serve serves handler over real HTTP for the test.
func serve(t *testing.T, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// response is what a request got.
type response struct {
	code   int
	body   string
	header http.Header
}

func do(t *testing.T, srv *httptest.Server, method, path string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{code: res.StatusCode, body: string(body), header: res.Header}
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

// start starts m, within wait.
func start(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	if err := m.Start(context.Background(), wait); err != nil {
		t.Fatal(err)
	}
}

func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
