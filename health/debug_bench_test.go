package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

// BenchmarkDebugStatusJSON is one status.json of a running manager with
// 1,000 controllers, over real HTTP: a Status from the supervisor, the
// handler's history, and the JSON.
func BenchmarkDebugStatusJSON(b *testing.B) {
	m, _, client := benchServer(b, 1000)
	srv := httptest.NewServer(health.NewDebugHandler(m))
	b.Cleanup(srv.Close)
	url := srv.URL + "/debug/supervision/status.json"
	probe(b, client, url)
	b.ResetTimer()
	for b.Loop() {
		probe(b, client, url)
	}
}

// BenchmarkDebugStreamStalled is what a browser that has stopped reading
// costs the publisher per event: the stream's subscriber finds its buffer
// full and counts the event as dropped. (The fake's publish, a lock and a
// copy of its subscribers, is most of it; in a manager the subscriber runs
// on the bus's goroutine for it, never the supervisor's.)
func BenchmarkDebugStreamStalled(b *testing.B) {
	src := newDebugSource(&testing.T{})
	h := health.NewDebugHandler(src, health.WithDebugRefresh(time.Hour))
	defer h.Close()
	h.Close() // measure the stream's subscriber alone, not the history's
	w := newGatedWriter()
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/debug/supervision/events", nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.ServeHTTP(w, req)
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(w.String(), "event: status\n") {
		<-tick.C
	}
	w.shut()
	e := supervisor.Event{Type: supervisor.ChildFailed, Time: time.Now(), Child: "boom", Err: fmt.Errorf("boom")}
	src.publish(e)
	<-w.entered
	for range 1000 { // fill the buffer
		src.publish(e)
	}
	b.ResetTimer()
	for b.Loop() {
		src.publish(e)
	}
	b.StopTimer()
	cancel()
	w.open()
	<-served
}
