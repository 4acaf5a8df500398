package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

// The second release's Debug* names are the live view's, not copies of it.
var (
	_ *liveview.View      = (*health.DebugHandler)(nil)
	_ liveview.Source     = health.DebugSource(nil)
	_ liveview.Option     = health.DebugOption(nil)
	_ liveview.Status     = health.DebugStatus{}
	_ liveview.Leadership = health.DebugLeadership{}
	_ liveview.Child      = health.DebugChild{}
	_ liveview.Error      = health.DebugError{}
	_ liveview.Event      = health.DebugEvent{}
	_ liveview.Shard      = health.DebugShard{}
	_ liveview.Controls   = health.DebugControls{}
	_ health.DebugSource  = staticSource{}
)

// staticSource is a running manager with one child and no events; a
// Request is refused.
type staticSource struct{}

func (staticSource) Status(context.Context) (supervisor.Status, error) {
	return supervisor.Status{Phase: supervisor.PhaseRunning, Children: []supervisor.ChildStatus{
		{Name: "jobs", Kind: "controller", State: supervisor.StateRunning, Healthy: true},
	}}, nil
}
func (staticSource) Subscribe(func(supervisor.Event)) func() { return func() {} }
func (staticSource) Request(context.Context, any) (any, error) {
	return nil, errors.New("no requests")
}

// TestDeprecatedDebugNames: code written against health.NewDebugHandler and
// its WithDebug* options still gets the live view, with every option
// applied.
func TestDeprecatedDebugNames(t *testing.T) {
	if health.DefaultDebugPrefix != liveview.DefaultPrefix || health.DebugTokenHeader != liveview.TokenHeader {
		t.Fatalf("constants: %q %q", health.DefaultDebugPrefix, health.DebugTokenHeader)
	}
	h := health.NewDebugHandler(staticSource{},
		health.WithDebugPrefix("/ops/tree"),
		health.WithDebugControls("s3cret"),
		health.WithDebugAllowedHosts("ops.example.com"),
		health.WithDebugMaxStreams(2),
		health.WithDebugTimeout(time.Second),
		health.WithDebugRefresh(time.Hour),
		health.WithDebugStreamBuffer(8),
		health.WithDebugWindow(time.Minute),
	)
	t.Cleanup(h.Close)
	srv := serve(t, h)

	res := get(t, srv, "/ops/tree/status.json")
	if res.code != http.StatusOK {
		t.Fatalf("status.json under WithDebugPrefix: %d %s", res.code, res.body)
	}
	var st health.DebugStatus
	if err := json.Unmarshal([]byte(res.body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Phase != "Running" || len(st.Children) != 1 || st.Children[0].Name != "jobs" {
		t.Errorf("status: %+v", st)
	}
	if !st.Controls.Enabled || !st.Controls.Token {
		t.Errorf("WithDebugControls(token): controls %+v", st.Controls)
	}
	if st.WindowSeconds != 60 {
		t.Errorf("WithDebugWindow(1m): windowSeconds %v", st.WindowSeconds)
	}
	if res := get(t, srv, liveview.DefaultPrefix+"/status.json"); res.code != http.StatusNotFound {
		t.Errorf("the default prefix, with WithDebugPrefix: %d, want 404", res.code)
	}

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/ops/tree/status.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "ops.example.com"
	allowed, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	allowed.Body.Close()
	if allowed.StatusCode != http.StatusOK {
		t.Errorf("Host of WithDebugAllowedHosts: %d, want 200", allowed.StatusCode)
	}
}
