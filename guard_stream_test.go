package controllermanager_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
)

// streamPaths are a pod's subresources that open a session (issue 23).
var streamPaths = map[string]string{
	"exec":        "/api/v1/namespaces/ns/pods/p/exec?command=date&stdout=true",
	"attach":      "/api/v1/namespaces/ns/pods/p/attach?stdout=true",
	"portforward": "/api/v1/namespaces/ns/pods/p/portforward",
}

// session opens a session the way client-go's executors and port
// forwarders do, from cfg, to the subresource at path.
type session struct {
	name string
	sub  string // "exec", "attach" or "portforward"
	open func(t *testing.T, cfg *rest.Config, u *url.URL) error
	// flattens: client-go formats the transport's error with %v on this
	// path, so errors.Is cannot see lease.ErrNotHeld (GuardTransport's doc).
	flattens bool
}

func spdyExecutor(t *testing.T, cfg *rest.Config, u *url.URL) remotecommand.Executor {
	e, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	require.NoError(t, err)
	return e
}

func webSocketExecutor(t *testing.T, cfg *rest.Config, u *url.URL) remotecommand.Executor {
	e, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	require.NoError(t, err)
	return e
}

func stream(e remotecommand.Executor) error {
	return e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
}

func spdyDialer(t *testing.T, cfg *rest.Config, u *url.URL) httpstream.Dialer {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	require.NoError(t, err)
	return spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
}

func webSocketDialer(t *testing.T, cfg *rest.Config, u *url.URL) httpstream.Dialer {
	d, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	require.NoError(t, err)
	return d
}

func forward(t *testing.T, d httpstream.Dialer) error {
	stop := make(chan struct{})
	defer close(stop)
	pf, err := portforward.New(d, []string{"0:80"}, stop, make(chan struct{}), io.Discard, io.Discard)
	require.NoError(t, err)
	return pf.ForwardPorts()
}

var sessions = []session{
	{name: "SPDYExecutor/exec", sub: "exec", flattens: true, open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return stream(spdyExecutor(t, cfg, u))
	}},
	{name: "SPDYExecutor/attach", sub: "attach", flattens: true, open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return stream(spdyExecutor(t, cfg, u))
	}},
	{name: "WebSocketExecutor/exec", sub: "exec", open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return stream(webSocketExecutor(t, cfg, u))
	}},
	{name: "WebSocketExecutor/attach", sub: "attach", open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return stream(webSocketExecutor(t, cfg, u))
	}},
	{name: "FallbackExecutor/exec", sub: "exec", open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		// kubectl's: WebSocket first, SPDY when the upgrade fails.
		e, err := remotecommand.NewFallbackExecutor(webSocketExecutor(t, cfg, u), spdyExecutor(t, cfg, u), func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		require.NoError(t, err)
		return stream(e)
	}},
	{name: "PortForward/SPDY", sub: "portforward", flattens: true, open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return forward(t, spdyDialer(t, cfg, u))
	}},
	{name: "PortForward/WebSocket", sub: "portforward", flattens: true, open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		return forward(t, webSocketDialer(t, cfg, u))
	}},
	{name: "PortForward/Fallback", sub: "portforward", flattens: true, open: func(t *testing.T, cfg *rest.Config, u *url.URL) error {
		// kubectl's: SPDY over WebSocket first, SPDY when the upgrade fails.
		return forward(t, portforward.NewFallbackDialer(webSocketDialer(t, cfg, u), spdyDialer(t, cfg, u), func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		}))
	}},
}

// Sessions opened by client-go's own executors and port forwarders, built
// from a rest.Config fenced with GuardTransport through Wrap, never reach the
// API server while the guard fails, whatever their method (the WebSocket
// executor's is GET); with a guard that passes, they do.
func TestGuardTransportFencesSessions(t *testing.T) {
	var reached atomic.Int32
	var lastPath atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		lastPath.Store(r.URL.Path)
		http.Error(w, "no sessions on this server", http.StatusForbidden) // a failed upgrade: the session ends
	}))
	t.Cleanup(srv.Close)
	notHeld := func() error { return &lease.NotHeldError{Lease: "ns/lease", Reason: "lost, for this test"} }
	held := func() error { return nil }

	for _, s := range sessions {
		t.Run(s.name, func(t *testing.T) {
			u, err := url.Parse(srv.URL + streamPaths[s.sub])
			require.NoError(t, err)
			fenced := func(guard func() error) *rest.Config {
				cfg := &rest.Config{Host: srv.URL}
				cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(guard, rt) })
				return cfg
			}

			before := reached.Load()
			err = s.open(t, fenced(notHeld), u)
			require.Error(t, err)
			assert.Equal(t, before, reached.Load(), "no request reached the server")
			assert.Contains(t, err.Error(), "refused by the lease guard")
			assert.Contains(t, err.Error(), "lease: not held (ns/lease): lost, for this test")
			if !s.flattens {
				require.ErrorIs(t, err, lease.ErrNotHeld)
			}

			err = s.open(t, fenced(held), u)
			require.Error(t, err, "the server refuses the upgrade")
			assert.NotContains(t, err.Error(), "refused by the lease guard")
			assert.Greater(t, reached.Load(), before, "the request reached the server")
			assert.Equal(t, strings.SplitN(streamPaths[s.sub], "?", 2)[0], lastPath.Load())
		})
	}
}

// What GuardTransport fences, request by request: mutating methods, any
// upgrade, and a pod's session subresources by any method, under any path
// prefix; other reads pass.
func TestGuardTransportFencesUpgrades(t *testing.T) {
	srv, reached := countingServer(t)
	notHeld := errors.New("not held, for this test")
	for _, tt := range []struct {
		name    string
		method  string
		path    string
		header  http.Header
		refused bool
	}{
		{"a read", http.MethodGet, "/api/v1/namespaces/ns/pods/p", nil, false},
		{"a pod's log", http.MethodGet, "/api/v1/namespaces/ns/pods/p/log", nil, false},
		{"a watch", http.MethodGet, "/api/v1/namespaces/ns/pods?watch=true", nil, false},
		{"Connection: keep-alive", http.MethodGet, "/api/v1/namespaces/ns/pods", http.Header{"Connection": {"keep-alive"}}, false},
		{"a pod named exec", http.MethodGet, "/api/v1/namespaces/ns/pods/exec", nil, false},
		{"exec by GET", http.MethodGet, "/api/v1/namespaces/ns/pods/p/exec", nil, true},
		{"exec, trailing slash", http.MethodGet, "/api/v1/namespaces/ns/pods/p/exec/", nil, true},
		{"attach by GET", http.MethodGet, "/api/v1/namespaces/ns/pods/p/attach", nil, true},
		{"portforward by GET", http.MethodGet, "/api/v1/namespaces/ns/pods/p/portforward", nil, true},
		{"exec behind a proxy's prefix", http.MethodGet, "/k8s/clusters/c-1/api/v1/namespaces/ns/pods/p/exec", nil, true},
		{"exec by HEAD", http.MethodHead, "/api/v1/namespaces/ns/pods/p/exec", nil, true},
		{"Upgrade: websocket", http.MethodGet, "/api/v1/nodes/n/proxy/exec/ns/p/c", http.Header{"Upgrade": {"websocket"}}, true},
		{"Connection: Upgrade", http.MethodGet, "/api/v1/namespaces/ns/services/s/proxy", http.Header{"Connection": {"keep-alive, Upgrade"}}, true},
		{"Sec-WebSocket-Protocol", http.MethodGet, "/x", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, true},
		{"X-Stream-Protocol-Version", http.MethodGet, "/x", http.Header{"X-Stream-Protocol-Version": {"portforward.k8s.io"}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := reached.Load()
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			require.NoError(t, err)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			resp, err := (&http.Client{Transport: cm.GuardTransport(func() error { return notHeld }, nil)}).Do(req)
			if !tt.refused {
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, before+1, reached.Load(), "sent")
				return
			}
			require.ErrorIs(t, err, notHeld)
			assert.Contains(t, err.Error(), tt.method+" "+strings.SplitN(tt.path, "?", 2)[0]+" refused by the lease guard")
			assert.Equal(t, before, reached.Load(), "never sent")
		})
	}
}
