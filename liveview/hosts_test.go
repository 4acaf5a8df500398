package liveview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/liveview"
)

// doHost sends a request with the given Host (and headers) to srv.
func doHost(t *testing.T, srv *httptest.Server, method, path, host string, header map[string]string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(action("restart", "boom").Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, body: string(b), header: res.Header}
}

// TestRefusesForeignHostsOnEveryRoute is DNS rebinding: a page on
// evil.example whose name now resolves to the view's loopback address
// reaches it as its own origin, and must be refused on every route, the
// controls with an empty token included, before anything is read or done
// (the source fails the test on a Request).
func TestRefusesForeignHostsOnEveryRoute(t *testing.T) {
	src := newViewSource(t)
	h := liveview.Handler(src, liveview.WithControls(""))
	defer h.Close()
	srv := serve(t, h)

	routes := []struct{ method, path string }{
		{http.MethodGet, "/debug/supervision/"},
		{http.MethodGet, "/debug/supervision"},
		{http.MethodGet, "/debug/supervision/index.html"},
		{http.MethodGet, "/debug/supervision/debug.js"},
		{http.MethodGet, "/debug/supervision/status.json"},
		{http.MethodGet, "/debug/supervision/events"},
		{http.MethodPost, "/debug/supervision/control"},
		{http.MethodGet, "/debug/supervision/nope"},
	}
	rebinding := map[string]string{liveview.TokenHeader: "", "Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}
	for _, host := range []string{"evil.example", "evil.example:8082", "attacker.example", "localhost.evil.example", "127.0.0.1.nip.io", "10.0.0.7"} {
		for _, rt := range routes {
			res := doHost(t, srv, rt.method, rt.path, host, rebinding)
			if res.code != http.StatusForbidden || !strings.Contains(res.body, "is not a name this live view is served under") ||
				!strings.Contains(res.body, "WithAllowedHosts") {
				t.Errorf("%s %s, Host %s: want 403 with the reason, have %d %q", rt.method, rt.path, host, res.code, res.body)
			}
		}
	}
	// No Host at all (HTTP/1.0) is not a name the view is served under.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/debug/supervision/status.json", nil)
	req.Host = ""
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("no Host: want 403, have %d %q", rec.Code, rec.Body.String())
	}

	for _, host := range []string{"localhost", "localhost:8082", "LocalHost.", "127.0.0.1", "127.1.2.3:80", "[::1]:8082", "[::1]", "[::ffff:127.0.0.1]:8082"} {
		if res := doHost(t, srv, http.MethodGet, "/debug/supervision/status.json", host, nil); res.code != http.StatusOK {
			t.Errorf("Host %s: want 200, have %d %q", host, res.code, res.body)
		}
	}
}

func TestAllowedHostsAddNames(t *testing.T) {
	h := liveview.Handler(newViewSource(t), liveview.WithAllowedHosts("ops.example.com", "10.0.0.7:8082", "[fd00::7]"))
	defer h.Close()
	srv := serve(t, h)
	for host, want := range map[string]int{
		"ops.example.com":     http.StatusOK,
		"OPS.example.com:443": http.StatusOK,
		"10.0.0.7":            http.StatusOK,
		"10.0.0.7:9999":       http.StatusOK, // any port
		"[fd00::7]:8082":      http.StatusOK,
		"localhost:8082":      http.StatusOK, // loopback stays allowed
		"evil.example":        http.StatusForbidden,
		"x.ops.example.com":   http.StatusForbidden, // names, not domains
		"10.0.0.8":            http.StatusForbidden,
	} {
		if res := doHost(t, srv, http.MethodGet, "/debug/supervision/status.json", host, nil); res.code != want {
			t.Errorf("Host %s: want %d, have %d %q", host, want, res.code, res.body)
		}
	}
	for _, bad := range []string{"", "ops.example.com/x", "a b", "user@host"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "WithAllowedHosts") {
					t.Errorf("WithAllowedHosts(%q): want a panic naming the option, have %v", bad, r)
				}
			}()
			liveview.Handler(newViewSource(t), liveview.WithAllowedHosts(bad)).Close()
		}()
	}
}

// TestControlsWithoutTokenRequireALoopbackPeer: an empty token is
// accepted from a loopback peer only; a token is accepted from anywhere.
func TestControlsWithoutTokenRequireALoopbackPeer(t *testing.T) {
	m := newRunningManager(t, &failing{name: "boom"})
	open := liveview.Handler(m, liveview.WithControls(""))
	defer open.Close()
	const token = "0123456789abcdef"
	guarded := liveview.Handler(m, liveview.WithControls(token))
	defer guarded.Close()
	start(t, m)

	control := func(h http.Handler, remote, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "http://localhost:8082/debug/supervision/control",
			strings.NewReader(action("restart", "boom").Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(liveview.TokenHeader, tok)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, remote := range []string{"10.1.2.3:4567", "192.0.2.1:1234", "[fd00::1]:80", "[::ffff:10.0.0.1]:80", "not an address"} {
		rec := control(open, remote, "")
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "openssl rand -hex 32") ||
			!strings.Contains(rec.Body.String(), "accepted only from a loopback address") {
			t.Errorf("empty token from %s: want 403 saying a token is needed and how to make one, have %d %q", remote, rec.Code, rec.Body.String())
		}
	}
	srv := serve(t, open)
	if c := child(t, getStatus(t, srv), "boom"); c.Restarts != 0 {
		t.Fatalf("after the refused requests: want no restart, have %d", c.Restarts)
	}
	for i, remote := range []string{"127.0.0.1:5555", "127.9.9.9:1", "[::1]:5555"} {
		if rec := control(open, remote, ""); rec.Code != http.StatusOK {
			t.Errorf("empty token from %s: want 200, have %d %q", remote, rec.Code, rec.Body.String())
		}
		if c := child(t, getStatus(t, srv), "boom"); c.Restarts != i+1 {
			t.Errorf("after a restart from %s: want %d restarts, have %d", remote, i+1, c.Restarts)
		}
	}
	if rec := control(guarded, "10.1.2.3:4567", token); rec.Code != http.StatusOK {
		t.Errorf("the token from 10.1.2.3: want 200, have %d %q", rec.Code, rec.Body.String())
	}
	if rec := control(guarded, "10.1.2.3:4567", ""); rec.Code != http.StatusForbidden {
		t.Errorf("an empty header against a token, from 10.1.2.3: want 403, have %d %q", rec.Code, rec.Body.String())
	}
}
