package liveview_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// The supervision tree in the live view: groups in status.json, nested,
// with their supervision and budget; lifecycle requests on paths; events
// on paths.

// crashing is a controller whose start calls fail while crash is set.
type crashing struct {
	name  string
	crash atomic.Bool
	runs  atomic.Int32
}

func (c *crashing) Name() string { return c.name }

func (c *crashing) Run(context.Context) error {
	c.runs.Add(1)
	if c.crash.Load() {
		return errors.New(c.name + " cannot start")
	}
	return nil
}

func (c *crashing) Shutdown(context.Context) {}
func (c *crashing) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

// groupStore is a store a group can hold: a group's children are
// Runnables, with a Shutdown.
type groupStore struct{ store }

func (groupStore) Shutdown(context.Context) {}

// tenantTree is the tree of the tests: a store at the root, and group
// "tenant-a" (RestForOne, 3 restarts, ExhaustedStop) with a store, a
// controller and group "inner" (OneForOne, 5 restarts) with a controller.
type tenantTree struct {
	m                  *cm.ControllerManager
	reconciler, worker *failing
}

func newTenantTree(t *testing.T) tenantTree {
	t.Helper()
	tr := tenantTree{reconciler: &failing{name: "reconciler"}, worker: &failing{name: "worker"}}
	tr.m = newRunningManager(t)
	tr.m.AddStore(store{name: "shared"})
	tr.m.Add(cm.NewGroup("tenant-a", cm.SupervisionSpec{Strategy: cm.RestForOne, MaxRestarts: 3, OnExhausted: cm.ExhaustedStop},
		groupStore{store{name: "store"}}, tr.reconciler,
		cm.NewGroup("inner", cm.SupervisionSpec{Strategy: cm.OneForOne, MaxRestarts: 5}, tr.worker)))
	return tr
}

// names are the Names of children.
func names(children []liveview.Child) []string {
	out := make([]string, len(children))
	for i, c := range children {
		out[i] = c.Name
	}
	return out
}

// treeChild finds the child at path at any depth, or fails the test.
func treeChild(t *testing.T, st liveview.Status, path string) liveview.Child {
	t.Helper()
	c, ok := st.Child(path)
	if !ok {
		t.Fatalf("no child %q in the tree %v", path, st.Children)
	}
	return c
}

func TestStatusJSONTree(t *testing.T) {
	tr := newTenantTree(t)
	srv := serve(t, liveview.Handler(tr.m))
	start(t, tr.m)

	st := getStatus(t, srv)
	if have, want := names(st.Children), []string{"shared", "tenant-a"}; !slices.Equal(have, want) {
		t.Fatalf("the root's children: want %v, have %v", want, have)
	}
	tenant := treeChild(t, st, "tenant-a")
	if have, want := names(tenant.Children), []string{"tenant-a/store", "tenant-a/reconciler", "tenant-a/inner"}; !slices.Equal(have, want) {
		t.Errorf("tenant-a's children, in start order: want %v, have %v", want, have)
	}
	inner := treeChild(t, st, "tenant-a/inner")
	if have, want := names(inner.Children), []string{"tenant-a/inner/worker"}; !slices.Equal(have, want) {
		t.Errorf("inner's children: want %v, have %v", want, have)
	}
	if tenant.Kind != "group" || tenant.State != "Running" || inner.Kind != "group" {
		t.Errorf("want the groups of kind group, tenant-a Running; have %s %s, %s", tenant.Kind, tenant.State, inner.Kind)
	}

	// Each group's supervision is the manager's, through the same
	// conversion the flat fields have.
	mst, err := tr.m.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	window := mst.Children[1].Group.RestartWindow.Seconds()
	if window <= 0 {
		t.Fatalf("tenant-a's window: want one inherited from the manager, have %v", window)
	}
	wantGroups := map[string]liveview.Group{
		"tenant-a": {Strategy: "RestForOne", MaxRestarts: 3, RestartWindowSeconds: window, OnExhausted: "Stop",
			ShutdownTimeoutSeconds: 30, HealthIntervalSeconds: 3600, HealthTimeoutSeconds: 1, UnhealthyThreshold: 3},
		// Inherits the window; OnExhausted is Escalate unless given.
		"tenant-a/inner": {Strategy: "OneForOne", MaxRestarts: 5, RestartWindowSeconds: window, OnExhausted: "Escalate",
			ShutdownTimeoutSeconds: 30, HealthIntervalSeconds: 3600, HealthTimeoutSeconds: 1, UnhealthyThreshold: 3},
	}
	for path, want := range wantGroups {
		c := treeChild(t, st, path)
		if c.Group == nil || *c.Group != want {
			t.Errorf("%s: want group %+v, have %+v", path, want, c.Group)
		}
	}
	for _, path := range []string{"shared", "tenant-a/store", "tenant-a/reconciler", "tenant-a/inner/worker"} {
		if c := treeChild(t, st, path); c.Group != nil || c.Children != nil || c.State != "Running" || c.Incarnation != 1 {
			t.Errorf("%s: want a Running leaf in its first incarnation, with neither group nor children; have %+v", path, c)
		}
	}

	// A failure deep in the tree: its row's counts and history, and the
	// budget its group has spent.
	tr.worker.fail(errors.New("lost the watch"))
	var worker liveview.Child
	eventually(t, "the worker restarted", func() bool {
		st = getStatus(t, srv)
		worker = treeChild(t, st, "tenant-a/inner/worker")
		return worker.Restarts == 1 && worker.State == "Running"
	})
	if worker.Failures != 1 || len(worker.RecentFailures) != 1 || worker.LastError == nil || !strings.Contains(worker.LastError.Message, "lost the watch") {
		t.Errorf("the worker: want 1 failure in its history with its error, have %+v", worker)
	}
	if g := treeChild(t, st, "tenant-a/inner").Group; g == nil || g.Spent != 1 {
		t.Errorf("inner: want 1 restart spent, have %+v", g)
	}
	if g := treeChild(t, st, "tenant-a").Group; g == nil || g.Spent != 0 {
		t.Errorf("tenant-a: its child inner did not restart, want nothing spent; have %+v", g)
	}
	if r := treeChild(t, st, "tenant-a/reconciler"); r.Restarts != 0 {
		t.Errorf("the reconciler: inner handled it, want no restart; have %d", r.Restarts)
	}
}

// A group whose budget is spent, with ExhaustedStop: stopped, marked
// exhausted, its failure in its own history; started again, with a fresh
// budget.
func TestStatusJSONExhaustedGroup(t *testing.T) {
	crash := &crashing{name: "crash"}
	m := newRunningManager(t, cm.NewGroup("flaky", cm.SupervisionSpec{MaxRestarts: 2, OnExhausted: cm.ExhaustedStop}, crash))
	srv := serve(t, liveview.Handler(m, liveview.WithControls("")))
	start(t, m)

	crash.crash.Store(true)
	res := post(t, srv, action("restart", "flaky/crash"), map[string]string{liveview.TokenHeader: ""})
	if res.code != http.StatusInternalServerError {
		t.Fatalf("restart of a child that cannot start: want 500, have %d %q", res.code, res.body)
	}
	var flaky liveview.Child
	eventually(t, "flaky stopped", func() bool {
		flaky = treeChild(t, getStatus(t, srv), "flaky")
		return flaky.State == "Stopped"
	})
	want := liveview.Group{Strategy: "OneForOne", MaxRestarts: 2, RestartWindowSeconds: flaky.Group.RestartWindowSeconds,
		OnExhausted: "Stop", Exhausted: true, Spent: 2,
		ShutdownTimeoutSeconds: 30, HealthIntervalSeconds: 3600, HealthTimeoutSeconds: 1, UnhealthyThreshold: 3}
	if flaky.Group == nil || *flaky.Group != want || flaky.LastError == nil || flaky.Failures != 1 || len(flaky.RecentFailures) != 1 {
		t.Errorf("flaky: want stopped with its budget spent, %+v, one failure recorded; have %+v group %+v", want, flaky, flaky.Group)
	}

	crash.crash.Store(false)
	if res := post(t, srv, action("start", "flaky"), map[string]string{liveview.TokenHeader: ""}); res.code != http.StatusOK {
		t.Fatalf("start flaky: want 200, have %d %q", res.code, res.body)
	}
	flaky = treeChild(t, getStatus(t, srv), "flaky")
	if flaky.State != "Running" || flaky.Group == nil || flaky.Group.Exhausted || flaky.Group.Spent != 0 {
		t.Errorf("flaky started again: want Running with a fresh budget, have %s %+v", flaky.State, flaky.Group)
	}
}

// A manager without groups keeps the fields it had: no "children" or
// "group" key on any row.
func TestStatusJSONFlatRowsUnchanged(t *testing.T) {
	m := newRunningManager(t, &failing{name: "boom"})
	m.AddStore(store{name: "inventory"})
	srv := serve(t, liveview.Handler(m))
	start(t, m)
	var raw struct {
		Children []map[string]json.RawMessage `json:"children"`
	}
	if err := json.Unmarshal([]byte(get(t, srv, "/debug/supervision/status.json").body), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Children) != 2 {
		t.Fatalf("want 2 rows, have %d", len(raw.Children))
	}
	// Those of the release before the tree; message and lastError only
	// when set.
	known := []string{"failures", "healthy", "incarnation", "kind", "lastError", "message", "name", "recentFailures", "restarts", "since", "state"}
	for _, row := range raw.Children {
		for key := range row {
			if !slices.Contains(known, key) {
				t.Errorf("row %s: want only the keys %v, have %q too", row["name"], known, key)
			}
		}
	}
}

// The event stream carries events on paths, and the snapshot after them
// has the nested row's new counts.
func TestEventStreamTree(t *testing.T) {
	tr := newTenantTree(t)
	srv := serve(t, liveview.Handler(tr.m, liveview.WithRefresh(time.Hour)))
	start(t, tr.m)

	s := openStream(t, srv, "/debug/supervision/events")
	defer s.close()
	first := decode[liveview.Status](t, s.next(t, "the first snapshot", func(m sseMessage) bool { return m.name == "status" }))
	if c := treeChild(t, first, "tenant-a/reconciler"); c.Restarts != 0 {
		t.Fatalf("first snapshot: want tenant-a/reconciler with no restart, have %+v", c)
	}

	tr.reconciler.fail(errors.New("lost the watch"))
	failed := decode[liveview.Event](t, s.next(t, "tenant-a/reconciler's ChildFailed", isEvent("ChildFailed", "tenant-a/reconciler")))
	if failed.Kind != "controller" || failed.Err == nil || !strings.Contains(failed.Err.Message, "lost the watch") {
		t.Errorf("ChildFailed: want the reconciler's error, have %+v", failed)
	}
	// RestForOne: the reconciler and inner, added after it, restart.
	s.next(t, "tenant-a/reconciler's ChildRestarted", isEvent("ChildRestarted", "tenant-a/reconciler"))
	s.next(t, "a snapshot with the restarts in the tree", func(m sseMessage) bool {
		if m.name != "status" {
			return false
		}
		st := decode[liveview.Status](t, m)
		r, tenant := treeChild(t, st, "tenant-a/reconciler"), treeChild(t, st, "tenant-a")
		return r.Restarts == 1 && r.Failures == 1 && len(r.RecentFailures) == 1 && r.State == "Running" &&
			treeChild(t, st, "tenant-a/store").Restarts == 0 && tenant.Group.Spent == 1
	})
}
