package liveview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/liveview"
)

// post sends a control request with the given headers.
func post(t *testing.T, srv *httptest.Server, form url.Values, header map[string]string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/debug/supervision/control", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: res.StatusCode, body: string(body), header: res.Header}
}

func action(a, childName string) url.Values { return url.Values{"action": {a}, "child": {childName}} }

func TestControlsOffByDefault(t *testing.T) {
	m := newRunningManager(t, &failing{name: "boom"})
	srv := serve(t, liveview.Handler(m))
	start(t, m)
	res := post(t, srv, action("restart", "boom"), map[string]string{liveview.TokenHeader: ""})
	if res.code != http.StatusNotFound || !strings.Contains(res.body, "the controls are off") {
		t.Errorf("want 404 naming the option, have %d %q", res.code, res.body)
	}
	if c := child(t, getStatus(t, srv), "boom"); c.Restarts != 0 {
		t.Errorf("boom: want no restart, have %d", c.Restarts)
	}
}

func TestControls(t *testing.T) {
	const token = "s3cret"
	m := newRunningManager(t, &failing{name: "boom"}, &failing{name: "calm"})
	srv := serve(t, liveview.Handler(m, liveview.WithControls(token)))
	start(t, m)
	if st := getStatus(t, srv); !st.Controls.Enabled || !st.Controls.Token {
		t.Errorf("status.json: want the controls on, with a token; have %+v", st.Controls)
	}
	good := map[string]string{liveview.TokenHeader: token}

	refused := []struct {
		name     string
		form     url.Values
		header   map[string]string
		wantCode int
		wantBody string
	}{
		{"no header", action("restart", "boom"), nil, 403, "header is missing"},
		{"wrong token", action("restart", "boom"), map[string]string{liveview.TokenHeader: "guess"}, 403, "wrong X-Supervision-Token"},
		{"empty token", action("restart", "boom"), map[string]string{liveview.TokenHeader: ""}, 403, "wrong X-Supervision-Token"},
		{"cross-site", action("restart", "boom"), map[string]string{liveview.TokenHeader: token, "Sec-Fetch-Site": "cross-site"}, 403, "refused"},
		{"other origin", action("restart", "boom"), map[string]string{liveview.TokenHeader: token, "Origin": "https://evil.example"}, 403, "refused"},
		{"unknown action", action("explode", "boom"), good, 400, "use restart, stop or start"},
		{"no child", action("restart", ""), good, 400, "the child field is empty"},
		{"unknown child", action("restart", "nobody"), good, 404, "unknown child"},
		{"start a running child", action("start", "boom"), good, 409, "already running"},
	}
	for _, r := range refused {
		res := post(t, srv, r.form, r.header)
		if res.code != r.wantCode || !strings.Contains(res.body, r.wantBody) {
			t.Errorf("%s: want %d with %q, have %d %q", r.name, r.wantCode, r.wantBody, res.code, res.body)
		}
	}
	if res := get(t, srv, "/debug/supervision/control"); res.code != http.StatusMethodNotAllowed || res.header.Get("Allow") != "POST" {
		t.Errorf("GET control: want 405 Allow: POST, have %d %q", res.code, res.header.Get("Allow"))
	}
	if c := child(t, getStatus(t, srv), "boom"); c.Restarts != 0 || c.State != "Running" {
		t.Fatalf("after the refused requests: want boom untouched, have %+v", c)
	}

	steps := []struct {
		action    string
		wantState string
		wantRst   int
	}{
		{"restart", "Running", 1},
		{"stop", "Stopped", 1},
		{"start", "Running", 2},
	}
	sameOrigin := map[string]string{liveview.TokenHeader: token, "Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}
	for _, s := range steps {
		if res := post(t, srv, action(s.action, "boom"), sameOrigin); res.code != http.StatusOK || res.body != `{"ok":true}`+"\n" {
			t.Fatalf("%s: want 200 ok, have %d %q", s.action, res.code, res.body)
		}
		// Answered once the supervisor has done it: no wait needed.
		if c := child(t, getStatus(t, srv), "boom"); c.State != s.wantState || c.Restarts != s.wantRst {
			t.Errorf("after %s: want %s with %d restarts, have %s with %d", s.action, s.wantState, s.wantRst, c.State, c.Restarts)
		}
	}
	if c := child(t, getStatus(t, srv), "calm"); c.Restarts != 0 {
		t.Errorf("calm: want untouched, have %d restarts", c.Restarts)
	}
}

func TestControlsWithoutToken(t *testing.T) {
	m := newRunningManager(t, &failing{name: "boom"})
	srv := serve(t, liveview.Handler(m, liveview.WithControls("")))
	start(t, m)
	if st := getStatus(t, srv); !st.Controls.Enabled || st.Controls.Token {
		t.Errorf("status.json: want the controls on, without a token; have %+v", st.Controls)
	}
	if res := post(t, srv, action("restart", "boom"), nil); res.code != http.StatusForbidden {
		t.Errorf("without the header: want 403, have %d %q", res.code, res.body)
	}
	if res := post(t, srv, action("restart", "boom"), map[string]string{liveview.TokenHeader: "", "Sec-Fetch-Site": "same-site"}); res.code != http.StatusForbidden {
		t.Errorf("from a sibling site: want 403, have %d %q", res.code, res.body)
	}
	if res := post(t, srv, action("restart", "boom"), map[string]string{liveview.TokenHeader: ""}); res.code != http.StatusOK {
		t.Errorf("with the header: want 200, have %d %q", res.code, res.body)
	}
	if c := child(t, getStatus(t, srv), "boom"); c.Restarts != 1 {
		t.Errorf("boom: want 1 restart, have %d", c.Restarts)
	}
}

func TestPageAndRouting(t *testing.T) {
	src := newViewSource(t)
	h := liveview.Handler(src)
	defer h.Close()
	srv := serve(t, h)
	noRedirect := *srv.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	page := get(t, srv, "/debug/supervision/")
	if page.code != 200 || page.header.Get("Content-Type") != "text/html; charset=utf-8" ||
		!strings.Contains(page.body, `<script src="debug.js" defer></script>`) || !strings.Contains(page.body, `<table id="children">`) {
		t.Errorf("page: want 200 HTML with the script and the table, have %d %s", page.code, page.header.Get("Content-Type"))
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("page: want a CSP allowing only its own files, have %q", csp)
	}
	// Self-contained: nothing fetched from another host.
	for _, asset := range []string{"/debug/supervision/", "/debug/supervision/debug.js", "/debug/supervision/debug.css"} {
		res := get(t, srv, asset)
		if res.code != 200 || strings.Contains(res.body, "http://") && !strings.Contains(res.body, "http://www.w3.org/2000/svg") || strings.Contains(res.body, "https://") {
			t.Errorf("%s: want 200 with no absolute address, have %d", asset, res.code)
		}
	}
	if res := get(t, srv, "/debug/supervision/debug.js"); res.header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("debug.js: Content-Type %q", res.header.Get("Content-Type"))
	}

	resp, err := noRedirect.Get(srv.URL + "/debug/supervision")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "supervision/" {
		t.Errorf("the bare prefix: want 301 to supervision/, have %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/", "/debug/supervisionx", "/debug/supervision/nope", "/healthz"} {
		if res := get(t, srv, path); res.code != http.StatusNotFound {
			t.Errorf("GET %s: want 404, have %d", path, res.code)
		}
	}
	if res := do(t, srv, http.MethodPost, "/debug/supervision/status.json"); res.code != http.StatusMethodNotAllowed {
		t.Errorf("POST status.json: want 405, have %d", res.code)
	}

	// Under http.StripPrefix, with the prefix that is left.
	mux := http.NewServeMux()
	stripped := liveview.Handler(src, liveview.WithPrefix("/"))
	defer stripped.Close()
	mux.Handle("/ops/", http.StripPrefix("/ops", stripped))
	ops := serve(t, mux)
	if res := get(t, ops, "/ops/status.json"); res.code != 200 || !strings.Contains(res.body, `"name":"boom"`) {
		t.Errorf("stripped: want status.json at /ops/status.json, have %d %q", res.code, res.body)
	}
}

func TestHandlerRejectsBadInput(t *testing.T) {
	for _, prefix := range []string{"debug", "/debug/../x", "/a?b"} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), "WithPrefix") {
					t.Errorf("prefix %q: want a panic naming WithPrefix, have %v", prefix, r)
				}
			}()
			liveview.Handler(newViewSource(t), liveview.WithPrefix(prefix))
		}()
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "nil Source") {
			t.Errorf("nil source: want a panic, have %v", r)
		}
	}()
	liveview.Handler(nil)
}
