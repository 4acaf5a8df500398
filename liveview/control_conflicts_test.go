package liveview_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/liveview"
)

// plainChild is a child with nothing to start: a Runnable that is neither
// a controller, a store nor a webhook.
type plainChild struct{}

func (plainChild) Name() string             { return "plain" }
func (plainChild) Shutdown(context.Context) {}

// A control the supervisor refuses because of the child's state is a
// conflict with that state (409), as ErrBusy, ErrNotRunning and ErrStopped
// are, not a server error: starting a running child (ErrAlreadyRunning),
// and restarting a child with nothing to start (ErrNothingToStart).
func TestControlStateRefusalsAreConflicts(t *testing.T) {
	const token = "s3cret"
	m := newRunningManager(t, &failing{name: "calm"}, plainChild{})
	srv := serve(t, liveview.Handler(m, liveview.WithControls(token)))
	start(t, m)
	good := map[string]string{liveview.TokenHeader: token}
	for _, c := range []struct{ action, child, say string }{
		{"start", "calm", "already running"},
		{"restart", "plain", "nothing to start"},
		{"start", "plain", "already running"},
	} {
		res := post(t, srv, action(c.action, c.child), good)
		if res.code != http.StatusConflict || !strings.Contains(res.body, c.say) {
			t.Errorf("%s %s: have %d %q, want 409 saying %q", c.action, c.child, res.code, res.body, c.say)
		}
	}
}
