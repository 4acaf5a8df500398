package controllermanager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// startFailing is a controller whose Run fails while fail is set.
type startFailing struct{ fail *atomic.Bool }

func (c startFailing) Name() string { return "ctrl" }
func (c startFailing) Run(context.Context) error {
	if c.fail.Load() {
		return errors.New("cannot start")
	}
	return nil
}
func (c startFailing) Shutdown(context.Context) {}
func (c startFailing) GetHealth() HealthStatus  { return HealthStatus{Name: "ctrl", Healthy: true} }

// A fleet whose subscription lost events (EventsDropped), the ChildFailed
// of a member's group among them, still finds out that the group stopped
// on its own: a member's loop reads the tree once (recheckStopped), and
// the member is Failed, as if the event had come; and, its ChildStarted
// lost as well, that it runs again.
func TestFleetFindsAStoppedGroupAfterLostEvents(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	var fail atomic.Bool
	spec := FleetSpec{ProbePeriod: metav1.Duration{Duration: time.Hour},
		Supervision: SupervisionSpec{MaxRestarts: 1, RestartWindow: metav1.Duration{Duration: time.Hour},
			InitialBackoff: metav1.Duration{Duration: time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 2 * time.Millisecond}}}
	fleet := NewFleet("fleet", StaticClusters(map[string]*rest.Config{"b": {Host: srv.URL}}),
		func(Cluster) []Runnable { return []Runnable{startFailing{fail: &fail}} }, spec)
	mgr, err := NewControllerManager(NewContext(nil), ControllerManagerConfigSpec{}, "", WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	mgr.Add(fleet)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Cleanup(func() { mgr.ShutdownAndWait(ctx) })
	if err := mgr.Start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	state := func() ClusterState {
		st, _ := fleet.Cluster("b")
		return st.State
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the deadline (cluster %s)", what, state())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitFor("b Online", func() bool { return state() == ClusterStateOnline })

	// The fleet's subscription goes: every event from here on is lost to it.
	fleet.mu.Lock()
	fleet.inc.unsub()
	fleet.mu.Unlock()
	fail.Store(true)
	if err := mgr.RestartChild(ctx, "fleet/b/ctrl"); err == nil {
		t.Fatal("RestartChild of a controller that cannot start answered nil")
	}
	waitFor("b's group exhausted", func() bool {
		st, err := mgr.Status(ctx)
		if err != nil {
			return false
		}
		cs, ok := st.Child("fleet/b")
		return ok && cs.Group != nil && cs.Group.Exhausted
	})
	if s := state(); s != ClusterStateOnline {
		t.Fatalf("the fleet heard of the group's failure with its subscription gone: %s", s)
	}

	fleet.eventsDropped() // what its subscription is told after losing events
	waitFor("b Failed", func() bool { return state() == ClusterStateFailed })
	if st, _ := fleet.Cluster("b"); st.Err == nil {
		t.Error("Failed without the group's error")
	}

	// Started again, its ChildStarted lost too: the next read finds it
	// running, and the member Online.
	fail.Store(false)
	if err := mgr.StartChild(ctx, "fleet/b"); err != nil {
		t.Fatal(err)
	}
	fleet.eventsDropped()
	waitFor("b Online again", func() bool { return state() == ClusterStateOnline })
}
