package liveview_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

// BenchmarkStatusJSON is one status.json of a running manager with
// 1,000 controllers, over real HTTP: a Status from the supervisor, the
// handler's history, and the JSON.
func BenchmarkStatusJSON(b *testing.B) {
	m, client := benchManager(b, 1000)
	srv := httptest.NewServer(liveview.Handler(m))
	b.Cleanup(srv.Close)
	url := srv.URL + "/debug/supervision/status.json"
	probe(b, client, url)
	b.ResetTimer()
	for b.Loop() {
		probe(b, client, url)
	}
}

// BenchmarkStreamStalled is what a browser that has stopped reading
// costs the publisher per event: the stream's subscriber finds its buffer
// full and counts the event as dropped. (The fake's publish, a lock and a
// copy of its subscribers, is most of it; in a manager the subscriber runs
// on the bus's goroutine for it, never the supervisor's.)
func BenchmarkStreamStalled(b *testing.B) {
	src := newViewSource(&testing.T{})
	h := liveview.Handler(src, liveview.WithRefresh(time.Hour))
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

// benchController is a healthy controller named by its index.
type benchController struct{ name string }

func (c benchController) Name() string            { return c.name }
func (benchController) Run(context.Context) error { return nil }
func (benchController) Shutdown(context.Context)  {}
func (c benchController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

// benchManager is a running manager with n controllers, and a client that
// keeps its connections.
func benchManager(b *testing.B, n int) (*cm.ControllerManager, *http.Client) {
	b.Helper()
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{HealthInterval: metav1.Duration{Duration: time.Hour}},
	}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		m.Add(benchController{name: fmt.Sprintf("controller-%04d", i)})
	}
	if err := m.Start(context.Background(), time.Minute); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(func() {
		client.CloseIdleConnections()
		m.ShutdownAndWait(context.Background())
	})
	return m, client
}

func probe(b *testing.B, client *http.Client, url string) {
	res, err := client.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.Errorf("GET %s: %d", url, res.StatusCode)
	}
}
