package liveview_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

// viewSource is a Source whose Subscribe keeps the subscribers for
// the test to call, as synchronously as a publisher can; a Request fails
// the test.
type viewSource struct {
	t         *testing.T
	status    supervisor.Status
	statusErr error // Status fails with it, when set

	mu   sync.Mutex
	subs map[*func(supervisor.Event)]bool
}

func newViewSource(t *testing.T) *viewSource {
	return &viewSource{t: t, subs: map[*func(supervisor.Event)]bool{},
		status: supervisor.Status{Phase: supervisor.PhaseRunning, Children: []supervisor.ChildStatus{
			{Name: "boom", Kind: "controller", State: supervisor.StateRunning, Healthy: true, Since: time.Now()},
		}}}
}

func (s *viewSource) Status(context.Context) (supervisor.Status, error) {
	if s.statusErr != nil {
		return supervisor.Status{}, s.statusErr
	}
	return s.status, nil
}

func (s *viewSource) Subscribe(fn func(supervisor.Event)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := &fn
	s.subs[key] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, key)
	}
}

func (s *viewSource) Request(_ context.Context, msg any) (any, error) {
	s.t.Errorf("unexpected Request(%T)", msg)
	return nil, errors.New("unexpected Request")
}

// publish calls every subscriber on the caller's goroutine.
func (s *viewSource) publish(e supervisor.Event) {
	s.mu.Lock()
	fns := make([]func(supervisor.Event), 0, len(s.subs))
	for fn := range s.subs {
		fns = append(fns, *fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(e)
	}
}

func (s *viewSource) subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// gatedWriter is a ResponseWriter whose writes block while its gate is
// shut: a browser that has stopped reading.
type gatedWriter struct {
	header  http.Header
	entered chan struct{} // a write is waiting at the shut gate

	mu   sync.Mutex
	gate chan struct{}
	body strings.Builder
}

func newGatedWriter() *gatedWriter {
	return &gatedWriter{header: http.Header{}, entered: make(chan struct{}, 1)}
}

func (w *gatedWriter) Header() http.Header { return w.header }
func (w *gatedWriter) WriteHeader(int)     {}
func (w *gatedWriter) Flush()              {}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	gate := w.gate
	w.mu.Unlock()
	if gate != nil {
		select {
		case w.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(p)
}

func (w *gatedWriter) shut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = make(chan struct{})
}

func (w *gatedWriter) open() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.gate)
	w.gate = nil
}

func (w *gatedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// A browser that stops reading costs the publisher nothing: its events are
// buffered up to the stream's bound, the rest counted, and once it reads
// again it is told how many it lost, then gets a fresh snapshot.
func TestStreamSlowBrowser(t *testing.T) {
	const buffer, published = 8, 100
	src := newViewSource(t)
	h := liveview.Handler(src, liveview.WithStreamBuffer(buffer), liveview.WithRefresh(time.Hour))
	defer h.Close()

	w := newGatedWriter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/debug/supervision/events", nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(w, req)
	}()
	eventually(t, "the first snapshot", func() bool { return strings.Contains(w.String(), "event: status\n") })
	if n := src.subscribers(); n != 2 {
		t.Fatalf("want 2 subscribers (the handler's history and the stream), have %d", n)
	}

	w.shut()
	failure := func(i int) supervisor.Event {
		return supervisor.Event{Type: supervisor.ChildFailed, Time: time.Now(), Child: "boom", Kind: "controller",
			Phase: supervisor.PhaseRunning, Restarts: i, Err: fmt.Errorf("failure %d", i)}
	}
	src.publish(failure(1))
	select {
	case <-w.entered: // the stream's goroutine is stuck writing event 1
	case <-time.After(wait):
		t.Fatal("the stream did not write the first event")
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := 2; i <= published; i++ {
			src.publish(failure(i))
		}
	}()
	select {
	case <-returned:
	case <-time.After(wait):
		t.Fatal("publishing blocked on a browser that does not read")
	}
	w.open()

	eventually(t, "the snapshot after the drop", func() bool {
		out := w.String()
		i := strings.Index(out, "event: dropped\n")
		return i >= 0 && strings.Contains(out[i:], "event: status\n")
	})
	cancel()
	<-served
	if n := src.subscribers(); n != 1 {
		t.Errorf("after the browser left: want the handler's own subscriber alone, have %d", n)
	}

	// Event 1, the count of those that found the buffer full, then the
	// buffered ones, in order.
	var have []string
	for _, block := range strings.Split(w.String(), "\n\n") {
		switch {
		case strings.HasPrefix(block, "event: event\n"):
			i := strings.Index(block, `"restarts":`)
			have = append(have, "event "+strings.SplitN(block[i+len(`"restarts":`):], ",", 2)[0])
		case strings.HasPrefix(block, "event: dropped\n"):
			have = append(have, strings.TrimPrefix(block, "event: dropped\ndata: "))
		}
	}
	want := []string{"event 1", fmt.Sprintf(`{"dropped":%d}`, published-1-buffer)}
	for i := 2; i <= 1+buffer; i++ {
		want = append(want, fmt.Sprintf("event %d", i))
	}
	if strings.Join(have, "; ") != strings.Join(want, "; ") {
		t.Errorf("the stream:\nwant %s\nhave %s", strings.Join(want, "; "), strings.Join(have, "; "))
	}

	// The handler's own history missed nothing.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/debug/supervision/status.json", nil))
	if have := strings.Count(rec.Body.String(), `"type":"ChildFailed"`); have != published {
		t.Errorf("status.json: want %d ChildFailed events recorded, have %d", published, have)
	}
	h.Close()
	if n := src.subscribers(); n != 0 {
		t.Errorf("after Close: want no subscriber, have %d", n)
	}
}

// A manager that does not answer: status.json says so with 503, and the
// stream with "unavailable", and goes on.
func TestSourceSilent(t *testing.T) {
	src := newViewSource(t)
	src.statusErr = fmt.Errorf("supervisor.GetStatus: %w", context.DeadlineExceeded)
	h := liveview.Handler(src)
	defer h.Close()
	srv := serve(t, h)
	res := get(t, srv, "/debug/supervision/status.json")
	if want := `{"error":"Status: supervisor.GetStatus: context deadline exceeded"}` + "\n"; res.code != http.StatusServiceUnavailable || res.body != want {
		t.Errorf("status.json: want 503 %q, have %d %q", want, res.code, res.body)
	}
	s := openStream(t, srv, "/debug/supervision/events")
	defer s.close()
	m := s.next(t, "the first message", func(sseMessage) bool { return true })
	if m.name != "unavailable" || !strings.Contains(m.data, "context deadline exceeded") {
		t.Errorf("stream: want unavailable with the reason, have %+v", m)
	}
	src.publish(supervisor.Event{Type: supervisor.ChildStarted, Time: time.Now(), Child: "boom", Kind: "controller", Phase: supervisor.PhaseRunning})
	s.next(t, "the event after", isEvent("ChildStarted", "boom"))
}
