package liveview_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/liveview"
)

// dialStream opens an event stream and reads it up to its first status
// snapshot; cancel ends it.
func dialStream(t *testing.T, srv *httptest.Server) (res *http.Response, lines *bufio.Scanner, cancel func()) {
	t.Helper()
	ctx, end := context.WithTimeout(context.Background(), wait)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/debug/supervision/events", nil)
	if err != nil {
		end()
		t.Fatal(err)
	}
	res, err = srv.Client().Do(req)
	if err != nil {
		end()
		t.Fatal(err)
	}
	stop := func() { end(); res.Body.Close() }
	if res.StatusCode != http.StatusOK {
		return res, nil, stop
	}
	lines = bufio.NewScanner(res.Body)
	lines.Buffer(nil, 1<<20)
	nextEvent(t, lines, "status")
	return res, lines, stop
}

// nextEvent reads lines up to the next event called name.
func nextEvent(t *testing.T, lines *bufio.Scanner, name string) {
	t.Helper()
	for lines.Scan() {
		if lines.Text() == "event: "+name {
			return
		}
	}
	t.Fatalf("the stream ended before an event %q: %v", name, lines.Err())
}

func TestStreamsAreCapped(t *testing.T) {
	src := newViewSource(t)
	h := liveview.Handler(src, liveview.WithMaxStreams(2))
	defer h.Close()
	srv := serve(t, h)

	_, _, stop1 := dialStream(t, srv)
	defer stop1()
	_, _, stop2 := dialStream(t, srv)
	defer stop2()
	res, _, stop3 := dialStream(t, srv)
	body := make([]byte, 512)
	n, _ := res.Body.Read(body)
	stop3()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "2" ||
		!strings.Contains(string(body[:n]), "too many event streams at once (2, liveview.WithMaxStreams)") {
		t.Errorf("a third stream: want 503, Retry-After: 2 and the reason, have %d %q %q", res.StatusCode, res.Header.Get("Retry-After"), body[:n])
	}
	if got := src.subscribers(); got != 3 { // the handler's own, and the two streams'
		t.Errorf("want 3 subscriptions, have %d", got)
	}
	// The other routes are not counted.
	if res := get(t, srv, "/debug/supervision/status.json"); res.code != http.StatusOK {
		t.Errorf("status.json with the streams full: want 200, have %d", res.code)
	}

	// A stream that ends gives its slot back.
	stop1()
	eventually(t, "a stream's slot to be free again", func() bool {
		res, _, stop := dialStream(t, srv)
		defer stop()
		return res.StatusCode == http.StatusOK
	})
}

// TestStreamOutlivesTheServersReadTimeout: a stream reads nothing from
// its client after the request, so the server's ReadTimeout (which cancels
// a request when its connection's read deadline passes) must not end it.
func TestStreamOutlivesTheServersReadTimeout(t *testing.T) {
	const readTimeout = 100 * time.Millisecond
	h := liveview.Handler(newViewSource(t), liveview.WithRefresh(3*readTimeout))
	defer h.Close()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	defer srv.Close()

	_, lines, stop := dialStream(t, srv)
	defer stop()
	began := time.Now()
	nextEvent(t, lines, "status") // the refresh, past the read timeout
	if d := time.Since(began); d < readTimeout {
		t.Errorf("the refresh came after %s, before the read timeout (%s): the test proves nothing", d, readTimeout)
	}
}
