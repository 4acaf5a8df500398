package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the demo's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemo runs the demo as the README does, on a free port, until the
// flaky controller has been restarted, then stops it as Ctrl-C would.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	served := startDemo(t, ctx, config{addr: "127.0.0.1:0", viewAddr: "127.0.0.1:0", failEvery: 50 * time.Millisecond}, &out, done)
	base := "http://" + served.api

	for _, path := range []string{"/readyz", "/healthz", "/livez", "/metrics"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	}
	// The live view is on its own listener, not on the one of /validate,
	// and answers only a loopback Host.
	resp, err := http.Get("http://" + served.view + "/debug/supervision/status.json")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the live view's status.json: %s", body)
	assert.Contains(t, out.String(), "supervision tree, live: http://"+served.view+"/debug/supervision/")
	resp, err = http.Get(base + "/debug/supervision/status.json")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the live view on the listener of /validate")
	req, err := http.NewRequest(http.MethodGet, "http://"+served.view+"/debug/supervision/status.json", nil)
	require.NoError(t, err)
	req.Host = "evil.example"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "the live view with a foreign Host")

	// A newcomer curls /metrics first: the manager's metrics, on the host's
	// registry beside the Go runtime's.
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "/metrics: %s", metrics)
	assert.Contains(t, string(metrics), "controllermanager_phase{")
	assert.Contains(t, string(metrics), "go_goroutines ")

	review := func(object string) *admissionv1.AdmissionResponse {
		in := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request:  &admissionv1.AdmissionRequest{UID: types.UID("uid-1"), Object: runtime.RawExtension{Raw: []byte(object)}},
		}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		resp, err := http.Post(base+"/validate?timeout=5s", "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var outReview admissionv1.AdmissionReview
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&outReview))
		require.NotNil(t, outReview.Response)
		assert.Equal(t, types.UID("uid-1"), outReview.Response.UID)
		return outReview.Response
	}
	assert.True(t, review(`{"spec":{}}`).Allowed)
	denied := review(`{"spec":{"privileged": true}}`)
	assert.False(t, denied.Allowed)
	assert.Equal(t, "privileged containers are not allowed", denied.Result.Message)

	require.True(t, testchild.Eventually(30*time.Second, func() bool { return strings.Contains(out.String(), "ChildRestarted") }),
		"the flaky controller was never restarted:\n%s", out.String())
	cancel()
	require.NoError(t, <-done, out.String())
	assert.Contains(t, out.String(), "stopped cleanly")
	assert.Contains(t, out.String(), "child=flaky")
}

// startDemo runs the demo with cfg until ctx ends (its error then goes to
// done) and returns the addresses it serves once it has started.
func startDemo(t *testing.T, ctx context.Context, cfg config, out *syncBuffer, done chan<- error) addrs {
	t.Helper()
	ready := make(chan addrs, 1)
	ended := make(chan error, 1)
	go func() {
		err := run(ctx, cfg, out, ready)
		ended <- err
		done <- err
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case a := <-ready:
		return a
	case err := <-ended:
		t.Fatalf("demo ended before it started: %v\n%s", err, out.String())
	case <-timer.C:
		t.Fatalf("demo did not start:\n%s", out.String())
	}
	return addrs{}
}

// TestDemoServesWithTheLibrarysTimeouts: both of the demo's listeners cut a
// client that dribbles its request: a body on the one of /validate (the
// read timeout), headers on the live view's (the header timeout). The
// demo's timeouts are the library webhook server's; the test shortens them.
func TestDemoServesWithTheLibrarysTimeouts(t *testing.T) {
	assert.Equal(t, timeouts{readHeader: 10 * time.Second, read: 30 * time.Second, write: 35 * time.Second, idle: 120 * time.Second}, serverTimeouts)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	short := timeouts{readHeader: 200 * time.Millisecond, read: 300 * time.Millisecond, write: time.Second, idle: time.Second}
	served := startDemo(t, ctx, config{addr: "127.0.0.1:0", viewAddr: "127.0.0.1:0", timeouts: short}, &out, done)

	cut := func(addr, what, request string) string {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, request)
		require.NoError(t, err)
		b, err := io.ReadAll(conn) // until the server closes the connection
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: the connection was still open after 10s", what)
		}
		return string(b)
	}
	answer := cut(served.api, "a slow body",
		"POST /validate?timeout=5s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"apiVersion\"")
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 400 "), "a slow body: want 400 once the read timeout cuts it, have %q", answer)
	assert.Contains(t, answer, "cannot read request body")
	answer = cut(served.view, "slow headers", "GET /debug/supervision/status.json HTTP/1.1\r\nHost: localhost\r\n")
	assert.NotContains(t, answer, "200 OK", "slow headers: want the connection cut, have %q", answer)

	cancel()
	require.NoError(t, <-done, out.String())
}
