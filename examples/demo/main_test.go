package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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

	"github.com/actorkube/controllermanager/internal/testchild"
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
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, config{addr: "127.0.0.1:0", failEvery: 50 * time.Millisecond}, &out, ready) }()

	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before it started: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("demo did not start:\n%s", out.String())
	}
	base := "http://" + addr

	for _, path := range []string{"/readyz", "/healthz", "/livez", "/metrics", "/debug/supervision/status.json"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	}

	// A newcomer curls /metrics first: the manager's metrics, on the host's
	// registry beside the Go runtime's.
	resp, err := http.Get(base + "/metrics")
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
