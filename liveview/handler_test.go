package liveview_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// Both managers, and the base they share, are what the supervision view
// shows.
var (
	_ liveview.Source = (*cm.ControllerManager)(nil)
	_ liveview.Source = (*cm.WebhookManager)(nil)
	_ liveview.Source = (*cm.BaseManager)(nil)
)

// failing is a controller that fails on demand: fail reports a failure
// through the FailureReporter of its current incarnation, and with
// panicNext set its next Run panics.
type failing struct {
	name      string
	panicNext atomic.Bool

	mu     sync.Mutex
	report func(error)
}

func (f *failing) Name() string { return f.name }

func (f *failing) Run(ctx context.Context) error {
	if f.panicNext.CompareAndSwap(true, false) {
		var m map[string]int
		m["crash"]++ // a real runtime panic: assignment to entry in nil map
	}
	report, ok := cm.FailureReporter(ctx)
	if !ok {
		return errors.New("no failure reporter in Run's context")
	}
	f.mu.Lock()
	f.report = report
	f.mu.Unlock()
	return nil
}

func (f *failing) fail(err error) {
	f.mu.Lock()
	report := f.report
	f.mu.Unlock()
	report(err)
}

func (f *failing) Shutdown(context.Context) {}
func (f *failing) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: f.name, Healthy: true, Message: "42 objects synced"}
}

type store struct{ name string }

func (s store) Name() string                  { return s.name }
func (s store) Recover(context.Context) error { return nil }

// newRunningManager returns a running ControllerManager with children that
// restart at once, shut down when the test ends.
func newRunningManager(t *testing.T, children ...cm.Runnable) *cm.ControllerManager {
	t.Helper()
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
		InitialBackoff: duration(time.Millisecond), MaxBackoff: duration(time.Millisecond),
		MaxRestarts: 100, HealthInterval: duration(time.Hour),
	}}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	m.Add(children...)
	return m
}

func getStatus(t *testing.T, srv *httptest.Server) liveview.Status {
	t.Helper()
	res := get(t, srv, "/debug/supervision/status.json")
	if res.code != http.StatusOK || res.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET status.json: %d %s %q", res.code, res.header.Get("Content-Type"), res.body)
	}
	var st liveview.Status
	if err := json.Unmarshal([]byte(res.body), &st); err != nil {
		t.Fatalf("status.json: %v: %q", err, res.body)
	}
	return st
}

func child(t *testing.T, st liveview.Status, name string) liveview.Child {
	t.Helper()
	for _, c := range st.Children {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no child %q in %+v", name, st.Children)
	return liveview.Child{}
}

func TestStatusJSON(t *testing.T) {
	boom := &failing{name: "boom"}
	m := newRunningManager(t, boom, &failing{name: "calm"})
	m.AddStore(store{name: "inventory"})
	srv := serve(t, liveview.Handler(m))

	before := getStatus(t, srv)
	if before.Phase != "Idle" || len(before.Children) != 0 || before.Leadership.Enabled || before.Controls.Enabled {
		t.Errorf("before Start: want phase Idle, no children, election and controls off; have %+v", before)
	}

	start(t, m)
	st := getStatus(t, srv)
	if st.Phase != "Running" {
		t.Errorf("phase: want Running, have %s", st.Phase)
	}
	type row struct {
		name, kind, state     string
		incarnation, restarts int
	}
	want := map[string]row{
		"inventory": {"inventory", "store", "Running", 1, 0},
		"boom":      {"boom", "controller", "Running", 1, 0},
		"calm":      {"calm", "controller", "Running", 1, 0},
	}
	for name, w := range want {
		c := child(t, st, name)
		if have := (row{c.Name, c.Kind, c.State, c.Incarnation, c.Restarts}); have != w {
			t.Errorf("child %s: want %+v, have %+v", name, w, have)
		}
		if c.Since.IsZero() || c.Since.After(st.Time) || c.LastError != nil || len(c.RecentFailures) != 0 {
			t.Errorf("child %s: want a start time before the snapshot's and no failures, have %+v", name, c)
		}
	}
	if st.WindowSeconds != 600 || st.HistorySince.After(st.Time) {
		t.Errorf("history: want a 600s window begun before the snapshot, have %v since %v", st.WindowSeconds, st.HistorySince)
	}

	// A reported failure, then a panic in the restart that follows.
	boom.panicNext.Store(true)
	boom.fail(errors.New("lost the watch"))
	var c liveview.Child
	eventually(t, "boom restarted after its panic", func() bool {
		c = child(t, getStatus(t, srv), "boom")
		return c.Restarts == 2 && c.State == "Running"
	})
	if c.Failures != 2 || c.Incarnation != 3 || len(c.RecentFailures) != 2 {
		t.Errorf("boom: want 2 failures, incarnation 3, 2 recent failures; have %+v", c)
	}
	if c.LastError == nil || !strings.Contains(c.LastError.Message, "panic in Run: assignment to entry in nil map") ||
		!strings.Contains(c.LastError.Stack, "(*failing).Run") {
		t.Errorf("boom's last error: want the panic with its stack, have %+v", c.LastError)
	}
	if calm := child(t, getStatus(t, srv), "calm"); calm.Restarts != 0 || calm.Failures != 0 {
		t.Errorf("calm: OneForOne restarts boom alone; have %+v", calm)
	}
	seen := map[string]int{}
	for _, e := range getStatus(t, srv).Events {
		if e.Child == "boom" {
			seen[e.Type]++
		}
	}
	if seen["ChildFailed"] != 2 || seen["ChildRestarted"] != 2 {
		t.Errorf("boom's recorded events: want 2 ChildFailed and 2 ChildRestarted, have %v", seen)
	}
}

// sseMessage is one Server-Sent Event.
type sseMessage struct{ name, data string }

// sseStream reads a Server-Sent Events response on a goroutine of its own.
type sseStream struct {
	cancel context.CancelFunc
	msgs   chan sseMessage
	done   chan struct{}
}

func openStream(t *testing.T, srv *httptest.Server, path string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		res.Body.Close()
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	s := &sseStream{cancel: cancel, msgs: make(chan sseMessage, 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.msgs)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.name != "" {
					s.msgs <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "event: "):
				m.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

func (s *sseStream) close() {
	s.cancel()
	<-s.done
}

// next returns the next message that match accepts, skipping the others.
func (s *sseStream) next(t *testing.T, what string, match func(sseMessage) bool) sseMessage {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			if match(m) {
				return m
			}
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func decode[T any](t *testing.T, m sseMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(m.data), &v); err != nil {
		t.Fatalf("%s event: %v: %q", m.name, err, m.data)
	}
	return v
}

func isEvent(typ, childName string) func(sseMessage) bool {
	return func(m sseMessage) bool {
		if m.name != "event" {
			return false
		}
		var e liveview.Event
		return json.Unmarshal([]byte(m.data), &e) == nil && e.Type == typ && e.Child == childName
	}
}

func TestEventStream(t *testing.T) {
	boom := &failing{name: "boom"}
	m := newRunningManager(t, boom, &failing{name: "calm"})
	srv := serve(t, liveview.Handler(m, liveview.WithRefresh(time.Hour)))
	start(t, m)

	s := openStream(t, srv, "/debug/supervision/events")
	defer s.close()
	first := decode[liveview.Status](t, s.next(t, "the first snapshot", func(m sseMessage) bool { return m.name == "status" }))
	if first.Phase != "Running" || len(first.Children) != 2 || child(t, first, "boom").Restarts != 0 {
		t.Fatalf("first snapshot: want Running with boom and calm, no restarts; have %+v", first)
	}

	boom.fail(errors.New("lost the watch"))
	failed := decode[liveview.Event](t, s.next(t, "boom's ChildFailed", isEvent("ChildFailed", "boom")))
	if failed.Err == nil || !strings.Contains(failed.Err.Message, "lost the watch") || failed.Kind != "controller" {
		t.Errorf("ChildFailed: want boom's error, have %+v", failed)
	}
	restarted := decode[liveview.Event](t, s.next(t, "boom's ChildRestarted", isEvent("ChildRestarted", "boom")))
	if restarted.Restarts != 1 {
		t.Errorf("ChildRestarted: want restarts 1, have %d", restarted.Restarts)
	}
	// The snapshot after the burst has the new counts, with no refresh due
	// for an hour: it is the burst's.
	s.next(t, "a snapshot with boom restarted", func(m sseMessage) bool {
		if m.name != "status" {
			return false
		}
		c := child(t, decode[liveview.Status](t, m), "boom")
		return c.Restarts == 1 && c.Failures == 1 && len(c.RecentFailures) == 1 && c.State == "Running"
	})

	// The manager stops: the stream says so, then ends.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m.ShutdownAndWait(ctx)
	final := decode[liveview.Status](t, s.next(t, "the final snapshot", func(m sseMessage) bool {
		return m.name == "status" && decode[liveview.Status](t, m).Phase == "Stopped"
	}))
	if c := child(t, final, "boom"); c.State != "Stopped" {
		t.Errorf("final snapshot: want boom Stopped, have %+v", c)
	}
	s.next(t, "the end", func(m sseMessage) bool { return m.name == "end" })
	if m, ok := <-s.msgs; ok {
		t.Errorf("after the end: want the stream closed, have %+v", m)
	}

	// A browser that connects after the stop gets the final state and the end.
	late := openStream(t, srv, "/debug/supervision/events")
	defer late.close()
	if st := decode[liveview.Status](t, late.next(t, "the late snapshot", func(m sseMessage) bool { return m.name == "status" })); st.Phase != "Stopped" {
		t.Errorf("late snapshot: want Stopped, have %s", st.Phase)
	}
	late.next(t, "the late end", func(m sseMessage) bool { return m.name == "end" })
}
