package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests.
const wait = 30 * time.Second

// syncBuffer is a bytes.Buffer safe for the program's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// started is what the observer's started hands over.
type started struct {
	m        *cm.ControllerManager
	viewAddr string
}

// program is one run of the program in the background.
type program struct {
	out, log syncBuffer
	started  chan started
	told     chan struct{}
	done     chan error
}

// startProgram runs the program with cfg (its live view on a free port,
// its log kept) until ctx ends or cfg.duration passes.
func startProgram(ctx context.Context, cfg config) *program {
	p := &program{started: make(chan started, 1), told: make(chan struct{}), done: make(chan error, 1)}
	cfg.viewAddr, cfg.log = "127.0.0.1:0", &p.log
	obs := &observer{
		started: func(m *cm.ControllerManager, viewAddr string) { p.started <- started{m: m, viewAddr: viewAddr} },
		told:    func() { close(p.told) },
	}
	go func() { p.done <- run(ctx, cfg, &p.out, obs) }()
	return p
}

func (p *program) output() string { return p.out.String() + "\nthe log:\n" + p.log.String() }

// waitStarted returns what the program hands over once its manager runs.
func (p *program) waitStarted(t *testing.T) started {
	t.Helper()
	select {
	case s := <-p.started:
		return s
	case err := <-p.done:
		t.Fatalf("the program ended before its manager ran: %v\n%s", err, p.output())
	case <-time.After(wait):
		t.Fatalf("the manager did not run within %s:\n%s", wait, p.output())
	}
	return started{}
}

// waitTold waits until the program has told its story.
func (p *program) waitTold(t *testing.T) {
	t.Helper()
	select {
	case <-p.told:
	case err := <-p.done:
		t.Fatalf("the program ended before it told its story: %v\n%s", err, p.output())
	case <-time.After(wait):
		t.Fatalf("the story was not told within %s:\n%s", wait, p.output())
	}
}

// waitDone returns the program's error once it has ended.
func (p *program) waitDone(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(wait):
		t.Fatalf("the program did not end within %s:\n%s", wait, p.output())
	}
	return nil
}

// reconcileCounts are the reconcilers' counters by path, from GetHealth.
func reconcileCounts(m *cm.ControllerManager) map[string]int64 {
	counts := map[string]int64{}
	for _, h := range m.GetHealth() {
		if n, ok := parseReconciles(h.Message); ok {
			counts[h.Name] = n
		}
	}
	return counts
}

// TestTenants runs the program until it has told its story and checks,
// through the manager's public API and the live view, that the story
// happened: tenant-d onboarded and running, tenant-b gone, tenant-c
// stopped with its budget spent while tenants a and d reconcile on; then
// it stops the program as SIGINT would.
func TestTenants(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startProgram(ctx, config{}) // no -duration: until ctx ends
	s := p.waitStarted(t)
	p.waitTold(t)

	st, err := s.m.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, cm.PhaseRunning, st.Phase)
	var roots []string
	for _, c := range st.Children {
		roots = append(roots, c.Name)
	}
	assert.Equal(t, []string{"shared-cache", "tenant-a", "tenant-c", "tenant-d"}, roots,
		"tenant-b removed, tenant-d added after the others")
	for _, gone := range []string{"tenant-b", "tenant-b/store", "tenant-b/reconciler"} {
		_, ok := st.Child(gone)
		assert.False(t, ok, "%s is still in Status", gone)
	}

	c, ok := st.Child("tenant-c")
	require.True(t, ok, "tenant-c is not in Status")
	assert.Equal(t, cm.StateStopped, c.State)
	require.NotNil(t, c.Group, "tenant-c's GroupStatus")
	assert.Equal(t, supervisor.GroupStatus{Strategy: cm.RestForOne, MaxRestarts: 2, RestartWindow: time.Minute,
		ShutdownTimeout: 30 * time.Second, HealthInterval: 200 * time.Millisecond, HealthTimeout: time.Second, UnhealthyThreshold: 3,
		StopOnExhausted: true, Exhausted: true, Spent: 2}, *c.Group)
	require.Error(t, c.LastError)
	assert.Contains(t, c.LastError.Error(), "lost its database")
	for _, path := range []string{"tenant-c/store", "tenant-c/reconciler"} {
		child, ok := st.Child(path)
		require.True(t, ok, path)
		assert.Equal(t, cm.StateStopped, child.State, path)
	}
	store, _ := st.Child("tenant-c/store")
	assert.Equal(t, 2, store.Restarts, "the store's two restarts, both failed")

	for _, tenant := range []string{"tenant-a", "tenant-d"} {
		g, ok := st.Child(tenant)
		require.True(t, ok, tenant)
		assert.Equal(t, cm.StateRunning, g.State, tenant)
		require.NotNil(t, g.Group, tenant)
		assert.False(t, g.Group.Exhausted, tenant)
		assert.Zero(t, g.Group.Spent, tenant)
		require.Len(t, g.Children, 2, tenant)
		for i, want := range []string{tenant + "/store", tenant + "/reconciler"} {
			assert.Equal(t, want, g.Children[i].Name)
			assert.Equal(t, cm.StateRunning, g.Children[i].State, want)
		}
	}

	// Tenants a and d keep reconciling, after tenant-c has stopped.
	before := reconcileCounts(s.m)
	require.Contains(t, before, "tenant-a/reconciler")
	require.Contains(t, before, "tenant-d/reconciler")
	var after map[string]int64
	require.True(t, testchild.Eventually(wait, func() bool {
		after = reconcileCounts(s.m)
		return after["tenant-a/reconciler"] > before["tenant-a/reconciler"] && after["tenant-d/reconciler"] > before["tenant-d/reconciler"]
	}), "tenants a and d stopped reconciling: %v, then %v", before, after)

	// The live view shows the same tree.
	resp, err := http.Get("http://" + s.viewAddr + liveview.DefaultPrefix + "/status.json")
	require.NoError(t, err)
	var view liveview.Status
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	states := map[string]string{}
	var walk func(children []liveview.Child)
	walk = func(children []liveview.Child) {
		for _, c := range children {
			states[c.Name] = c.State
			walk(c.Children)
		}
	}
	walk(view.Children)
	assert.Equal(t, map[string]string{
		"shared-cache": "Running",
		"tenant-a":     "Running", "tenant-a/store": "Running", "tenant-a/reconciler": "Running",
		"tenant-c": "Stopped", "tenant-c/store": "Stopped", "tenant-c/reconciler": "Stopped",
		"tenant-d": "Running", "tenant-d/store": "Running", "tenant-d/reconciler": "Running",
	}, states, "the live view's tree")
	viewC, ok := view.Child("tenant-c")
	require.True(t, ok, "tenant-c is not in the live view")
	require.NotNil(t, viewC.Group, "tenant-c's group in the live view")
	assert.Equal(t, liveview.Group{Strategy: "RestForOne", MaxRestarts: 2, RestartWindowSeconds: 60, OnExhausted: "Stop", Exhausted: true, Spent: 2,
		ShutdownTimeoutSeconds: 30, HealthIntervalSeconds: 0.2, HealthTimeoutSeconds: 1, UnhealthyThreshold: 3}, *viewC.Group)

	out := p.out.String()
	for _, heading := range []string{"1. started", "2. tenant-d onboarded", "3. tenant-b offboarded", "4. tenant-c's store crash-looped"} {
		assert.Contains(t, out, "\n"+heading, "the output has no step %q", heading)
	}
	assert.Contains(t, out, "tenant-b's reconciler shut down after")
	assert.Contains(t, out, "(running: false)")

	cancel()
	require.NoError(t, p.waitDone(t), p.output())
	assert.Contains(t, p.out.String(), "stopped cleanly")
}

// TestTenantsStopsAfterDuration: with -duration the program ends by
// itself and cleanly, whether or not its story was told by then.
func TestTenantsStopsAfterDuration(t *testing.T) {
	p := startProgram(context.Background(), config{duration: time.Second})
	require.NoError(t, p.waitDone(t), p.output())
	assert.Contains(t, p.out.String(), "stopped cleanly")
	select {
	case s := <-p.started: // the final Status, once stopped
		st, err := s.m.Status(context.Background())
		require.NoError(t, err)
		assert.Equal(t, cm.PhaseStopped, st.Phase)
	default: // the manager had not started within the second
	}
}

// TestTenantsCutShort: a stop (SIGINT) before the story is told cuts it
// short, and the program still ends cleanly.
func TestTenantsCutShort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startProgram(ctx, config{})
	p.waitStarted(t)
	cancel() // the story has not begun: started is called before it
	require.NoError(t, p.waitDone(t), p.output())
	assert.Contains(t, p.out.String(), "the story was cut short")
	assert.Contains(t, p.out.String(), "stopped cleanly")
	select {
	case <-p.told:
		t.Fatal("the story was told after the stop")
	default:
	}
}

// TestTenantsFailedStory: a story whose request the manager refuses ends
// the program with that error (exit status 1), after a clean shutdown of
// the manager.
func TestTenantsFailedStory(t *testing.T) {
	var out syncBuffer
	var m *cm.ControllerManager
	var addErr error
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), config{viewAddr: "127.0.0.1:0"}, &out, &observer{started: func(mgr *cm.ControllerManager, _ string) {
			// The story's first request, onboarding tenant-d, will be
			// refused: a group by that name is there already.
			m, addErr = mgr, mgr.AddChild(context.Background(), newTenant("tenant-d").group())
		}})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(wait):
		t.Fatalf("the program did not end within %s:\n%s", wait, out.String())
	}
	require.NoError(t, addErr, "the test's own onboarding of tenant-d")
	require.Error(t, err, out.String())
	assert.Contains(t, err.Error(), "onboarding tenant-d")
	assert.NotContains(t, out.String(), "stopped cleanly")
	st, err := m.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, cm.PhaseStopped, st.Phase, "the manager was shut down")
}

// TestFormatTree draws a tree as the README shows it: paths, kinds and
// states, a group's supervision, a running child's message, a stopped
// child's last error.
func TestFormatTree(t *testing.T) {
	st := cm.Status{Phase: cm.PhaseRunning, Children: []cm.ChildStatus{
		{Name: "shared", Kind: "store", State: cm.StateRunning},
		{Name: "t", Kind: "group", State: cm.StateStopped, LastError: errors.New("boom"),
			Group: &supervisor.GroupStatus{Strategy: cm.RestForOne, MaxRestarts: 2, RestartWindow: time.Minute, StopOnExhausted: true, Exhausted: true, Spent: 2},
			Children: []cm.ChildStatus{
				{Name: "t/store", Kind: "store", State: cm.StateStopped, Restarts: 2},
				{Name: "t/reconciler", Kind: "controller", State: cm.StateRunning},
			}},
	}}
	have := formatTree(st, map[string]string{"t/reconciler": "7 reconciles", "t/store": "not shown: the store is stopped"})
	want := strings.Join([]string{
		"manager                           Running",
		"├── shared            store       Running",
		"└── t                 group       Stopped  RestForOne, restarts 2/2 per 1m0s, OnExhausted Stop; EXHAUSTED; last error: boom",
		"    ├── t/store       store       Stopped  restarted 2×",
		"    └── t/reconciler  controller  Running  7 reconciles",
	}, "\n")
	assert.Equal(t, want, have)
}
