package controllermanager_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// stallingLog is a slog.Handler that holds the goroutine logging msg until
// release is closed, and closes stalled as it begins to: the supervisor
// logs "group failed" from its Receive, so holding that record holds the
// supervisor, and a GetHealth meanwhile gets no answer from it.
type stallingLog struct {
	msg     string
	stalled chan struct{}
	once    *sync.Once
	release <-chan struct{}
}

func (h stallingLog) Enabled(context.Context, slog.Level) bool { return true }
func (h stallingLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h stallingLog) WithGroup(string) slog.Handler            { return h }
func (h stallingLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.stalled) })
		<-h.release
	}
	return nil
}

// A GetHealth the supervisor does not answer names every controller and
// group the manager has, as the answered GetHealth does: those added by
// AddChild after Start and those inside groups included. Found by a
// read: the fallback named only the controllers given at Start, so a
// controller added later vanished from /healthz (its
// /healthz/controller/<path> turning 404) exactly when the supervisor was
// stuck.
func TestGetHealthUnansweredNamesEveryChild(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	stall := stallingLog{msg: "group failed", stalled: make(chan struct{}), once: &sync.Once{}, release: release}
	sup := gFast()
	sup.HealthTimeout = gDuration(100 * time.Millisecond)
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: sup}, "", cm.WithLogger(slog.New(stall)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // runs first: the supervisor goes on

	m.Add(testchild.NewController("first", testchild.Behavior{}))
	gStart(t, m)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, m.AddChild(ctx, testchild.NewController("late", testchild.Behavior{})))
	bad := testchild.NewController("bad", testchild.Behavior{Run: func(_ context.Context, n int) error {
		if n > 1 {
			return errors.New("cannot start again")
		}
		return nil
	}})
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{MaxRestarts: 1, OnExhausted: cm.ExhaustedStop},
		testchild.NewController("ok", testchild.Behavior{}), bad)))

	var want []string
	for _, st := range m.GetHealth() {
		want = append(want, st.Name)
	}
	require.ElementsMatch(t, []string{"first", "late", "g/ok", "g/bad", "g"}, want, "the answered GetHealth")

	bad.Fail(errors.New("boom")) // restarts fail until g spends its budget: the supervisor logs "group failed"
	select {
	case <-stall.stalled:
	case <-time.After(wait):
		t.Fatal("the supervisor never logged \"group failed\"")
	}

	got := m.GetHealth()
	var names []string
	for _, st := range got {
		names = append(names, st.Name)
		assert.False(t, st.Healthy, "%q", st.Name)
		assert.Contains(t, st.Message, "the supervisor did not answer within 100ms", "%q", st.Name)
	}
	assert.Equal(t, want, names, "the unanswered GetHealth names what the answered one did, in its order")
	releaseOnce.Do(func() { close(release) })
}
