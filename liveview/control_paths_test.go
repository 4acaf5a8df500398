package liveview_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

// The controls act on any path: a child in a group, a group whole; a
// malformed path and an unknown one are refused with the reason, the
// latter naming what is there.
func TestControlsOnPaths(t *testing.T) {
	tr := newTenantTree(t)
	tr.m.Add(&failing{name: "boom"})
	srv := serve(t, liveview.Handler(tr.m, liveview.WithControls("")))
	start(t, tr.m)
	loopback := map[string]string{liveview.TokenHeader: ""}

	refused := []struct {
		name     string
		child    string
		wantCode int
		wantBody string
	}{
		{"a trailing slash", "tenant-a/", 400, `segment 2 of the path is empty`},
		{"a leading slash", "/tenant-a", 400, `segment 1 of the path is empty`},
		{"an empty segment", "tenant-a//reconciler", 400, `segment 2 of the path is empty`},
		{"a blank segment", "tenant-a/ /reconciler", 400, `segment 2 of the path is empty`},
		{"a control character", "tenant-a/recon\x00ciler", 400, `a control character (U+0000) at byte 14`},
		{"not UTF-8", "tenant-a/\xff", 400, `not valid UTF-8`},
		{"unknown in a group", "tenant-a/nobody", 404,
			`unknown child "tenant-a/nobody"; the children of group "tenant-a" are "tenant-a/store", "tenant-a/reconciler", "tenant-a/inner"`},
		{"unknown in a nested group", "tenant-a/inner/nobody", 404, `the children of group "tenant-a/inner" are "tenant-a/inner/worker"`},
		{"unknown at the root", "tenant-b/reconciler", 404, `the children of the root are "shared", "tenant-a", "boom"`},
		{"under a controller", "boom/x", 404, `"boom" is a controller, not a group`},
	}
	for _, r := range refused {
		res := post(t, srv, action("restart", r.child), loopback)
		var answer struct{ Error string }
		_ = json.Unmarshal([]byte(res.body), &answer)
		if res.code != r.wantCode || !strings.Contains(answer.Error, r.wantBody) {
			t.Errorf("%s: want %d with %q, have %d %q", r.name, r.wantCode, r.wantBody, res.code, answer.Error)
		}
	}
	if st := getStatus(t, srv); treeChild(t, st, "tenant-a/reconciler").Restarts != 0 || treeChild(t, st, "tenant-a").Restarts != 0 {
		t.Fatalf("after the refused requests: want nothing restarted, have %+v", st.Children)
	}

	// A child in a group: RestForOne is the group's strategy for failures,
	// a RestartChild restarts the child it names.
	if res := post(t, srv, action("restart", "tenant-a/reconciler"), loopback); res.code != http.StatusOK {
		t.Fatalf("restart tenant-a/reconciler: want 200, have %d %q", res.code, res.body)
	}
	st := getStatus(t, srv)
	if r := treeChild(t, st, "tenant-a/reconciler"); r.Restarts != 1 || r.State != "Running" {
		t.Errorf("tenant-a/reconciler: want Running after 1 restart, have %s %d", r.State, r.Restarts)
	}
	if s := treeChild(t, st, "tenant-a/store"); s.Restarts != 0 {
		t.Errorf("tenant-a/store: want untouched, have %d restarts", s.Restarts)
	}

	// A group whole: stop, then start, every child with it.
	steps := []struct {
		action, wantState string
	}{{"stop", "Stopped"}, {"start", "Running"}}
	for _, s := range steps {
		if res := post(t, srv, action(s.action, "tenant-a"), loopback); res.code != http.StatusOK {
			t.Fatalf("%s tenant-a: want 200, have %d %q", s.action, res.code, res.body)
		}
		st := getStatus(t, srv)
		for _, path := range []string{"tenant-a", "tenant-a/store", "tenant-a/reconciler", "tenant-a/inner", "tenant-a/inner/worker"} {
			if c := treeChild(t, st, path); c.State != s.wantState {
				t.Errorf("after %s tenant-a: want %s %s, have %s", s.action, path, s.wantState, c.State)
			}
		}
		if c := treeChild(t, st, "shared"); c.State != "Running" {
			t.Errorf("after %s tenant-a: want shared Running, have %s", s.action, c.State)
		}
	}
}

// "/" is in no child's name, groups or not (issue 34 §4: the manager
// refuses such a name at Start, with ErrInvalidName), so a control naming
// "legacy//cron" is a malformed path, refused by the view. This test used
// to start a manager with a child named "legacy//cron" and restart it
// through the controls: that child can no longer exist.
func TestControlsOnFlatNameWithSlash(t *testing.T) {
	refused, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	refused.Add(&failing{name: "legacy//cron"})
	if err := refused.Start(context.Background(), wait); !errors.Is(err, cm.ErrInvalidName) {
		t.Fatalf("a child named legacy//cron: want Start to fail with ErrInvalidName, have %v", err)
	}
	m := newRunningManager(t, &failing{name: "cron"})
	srv := serve(t, liveview.Handler(m, liveview.WithControls("")))
	start(t, m)
	if res := post(t, srv, action("restart", "legacy//cron"), map[string]string{liveview.TokenHeader: ""}); res.code != http.StatusBadRequest {
		t.Errorf("legacy//cron: want 400 for the malformed path, have %d %q", res.code, res.body)
	}
}

// An unknown path in a control request is answered by the supervisor,
// not guessed by the view: a name the Status had not yet is sent on.
func TestControlsUnknownPathSentOn(t *testing.T) {
	src := &recordingSource{viewSource: newViewSource(t)}
	h := liveview.Handler(src, liveview.WithControls(""))
	defer h.Close()
	srv := serve(t, h)
	res := post(t, srv, url.Values{"action": {"stop"}, "child": {"late/child"}}, map[string]string{liveview.TokenHeader: ""})
	if sent := src.messages(); res.code != http.StatusOK || !slices.Equal(sent, []any{supervisor.StopChild{Name: "late/child"}}) {
		t.Fatalf("want the StopChild sent on and answered 200, have %d %q after %v", res.code, res.body, sent)
	}
}

// recordingSource is a viewSource whose Request records the message and
// answers nil.
type recordingSource struct {
	*viewSource
	mu   sync.Mutex
	sent []any
}

func (s *recordingSource) Request(_ context.Context, msg any) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, msg)
	return nil, nil
}

func (s *recordingSource) messages() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}
