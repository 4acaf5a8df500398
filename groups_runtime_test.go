package controllermanager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// Whole groups added to and removed from a running manager (a tenant
// onboarded or removed): one call, the group's children started (stores
// first) or stopped, nothing else disturbed.

func gCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func TestGroupAddedAndRemovedAtRunTime(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	rec := record(m)
	steady := newGController(log, "steady/ctrl")
	m.Add(cm.NewGroup("steady", cm.SupervisionSpec{}, steady))
	gStart(t, m)

	store, ctrl := newGStore(log, "t2/store"), newGController(log, "t2/ctrl")
	inner := newGController(log, "t2/inner/ctrl")
	// The store is added after the controller, and still starts first.
	require.NoError(t, m.AddChild(gCtx(t), cm.NewGroup("t2", cm.SupervisionSpec{Strategy: cm.RestForOne}, ctrl, store,
		cm.NewGroup("inner", cm.SupervisionSpec{}, inner))))
	// Answered once every child has started.
	for _, p := range []string{"t2/store", "t2/ctrl", "t2/inner/ctrl"} {
		assert.Equal(t, supervisor.StateRunning, gState(t, m, p), p)
	}
	starts := slices.DeleteFunc(log.snapshot(), func(e string) bool { return e == "start steady/ctrl" })
	assert.Equal(t, []string{"start t2/store", "start t2/ctrl", "start t2/inner/ctrl"}, starts)
	t2, ok := mustStatus(t, m).Child("t2")
	require.True(t, ok)
	require.NotNil(t, t2.Group)
	assert.Equal(t, cm.RestForOne, t2.Group.Strategy)
	assert.Zero(t, t2.Restarts, "a first start, not a restart")
	assert.Zero(t, store.Restarts(t, m))

	// It is supervised by its own strategy: the store's failure restarts
	// the store and what was added after it, not the controller before it.
	store.fail()
	rec.gWait(t, 1, cm.ChildRestarted, "t2/store")
	rec.gWait(t, 1, cm.ChildRestarted, "t2/inner/ctrl")
	assert.Zero(t, rec.gCount(cm.ChildRestarted, "t2/ctrl"))

	// A group under a group added at run time, by the message.
	deep := newGController(log, "t2/inner/deeper/ctrl")
	_, err := m.Request(gCtx(t), supervisor.AddChild{Parent: "t2/inner", Runnable: cm.NewGroup("deeper", cm.SupervisionSpec{}, deep)})
	require.NoError(t, err)
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "t2/inner/deeper/ctrl"))

	// Removed whole: every child shut down, then gone from Status and
	// health, each removal an event; the other group untouched.
	require.NoError(t, m.RemoveChild(gCtx(t), "t2"))
	for _, p := range []string{"t2/store", "t2/ctrl", "t2/inner/ctrl", "t2/inner/deeper/ctrl"} {
		assert.Equal(t, 1, log.count("stop "+p)-restartsOf(rec, p), p)
		rec.gWait(t, 1, cm.ChildRemoved, p)
	}
	rec.gWait(t, 1, cm.ChildRemoved, "t2")
	rec.gWait(t, 1, cm.ChildRemoved, "t2/inner")
	st := mustStatus(t, m)
	_, still := st.Child("t2")
	assert.False(t, still)
	require.Len(t, st.Children, 1)
	for _, h := range m.GetHealth() {
		assert.NotContains(t, h.Name, "t2", "removed from health")
	}
	assert.Equal(t, 1, steady.runCount())
	assert.Zero(t, log.count("stop steady/ctrl"))

	// The name is free again.
	again := newGController(log, "t2/ctrl")
	require.NoError(t, m.AddChild(gCtx(t), cm.NewGroup("t2", cm.SupervisionSpec{}, again)))
	assert.Equal(t, 1, again.runCount())
}

// restartsOf is how many ChildRestarted events rec saw for path: each was
// preceded by a Shutdown.
func restartsOf(rec *recorder, path string) int { return rec.gCount(cm.ChildRestarted, path) }

// Restarts of the store as Status counts them.
func (s gStore) Restarts(t *testing.T, m *cm.ControllerManager) int {
	t.Helper()
	cs, ok := mustStatus(t, m).Child(s.path)
	require.True(t, ok)
	return cs.Restarts
}

func TestGroupAddedAtRunTimeIsValidated(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	m.Add(cm.NewGroup("a", cm.SupervisionSpec{}, newGController(log, "a/ctrl")), newGController(log, "solo"))
	gStart(t, m)

	err := m.AddChild(gCtx(t), cm.NewGroup("a", cm.SupervisionSpec{}, newGController(log, "a/x")))
	require.ErrorIs(t, err, cm.ErrDuplicateChild)
	err = m.AddChild(gCtx(t), cm.NewGroup("solo", cm.SupervisionSpec{}))
	require.ErrorIs(t, err, cm.ErrDuplicateChild, "a group's name is unique among its siblings, hosted ones too")
	_, err = m.Request(gCtx(t), supervisor.AddChild{Parent: "nope", Runnable: cm.NewGroup("g", cm.SupervisionSpec{})})
	require.ErrorIs(t, err, cm.ErrUnknownChild)
	assert.Contains(t, err.Error(), `"nope"`)
	err = m.AddChild(gCtx(t), cm.NewGroup("bad/name", cm.SupervisionSpec{}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad/name")
	err = m.AddChild(gCtx(t), cm.NewGroup("g", cm.SupervisionSpec{Strategy: "Sometimes"}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Sometimes")
	err = m.AddChild(gCtx(t), cm.NewGroup("g", cm.SupervisionSpec{}, newGController(log, "g/x"), newGController(log, "g/x")))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `both named "g/x"`)
	_, err = m.Request(gCtx(t), supervisor.AddChild{Name: "other", Runnable: cm.NewGroup("g", cm.SupervisionSpec{})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NewGroup")
	// Nothing was added by the refused calls.
	st := mustStatus(t, m)
	assert.Len(t, st.Children, 2)
	assert.Equal(t, 1, log.count("start a/ctrl"))
}

// A group whose store's Recover is slow (an API server answering in
// 100 ms), removed while it is starting: the RemoveChild waits for the
// start call, then shuts down what started; nothing stays behind.
func TestGroupRemovedWhileItStarts(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	gStart(t, m)
	release := make(chan struct{})
	store, ctrl := newGStore(log, "slow/store"), newGController(log, "slow/ctrl")
	store.set(func(c *gChild) { c.hangRun = release })
	added := make(chan error, 1)
	go func() { added <- m.AddChild(gCtx(t), cm.NewGroup("slow", cm.SupervisionSpec{}, store, ctrl)) }()
	gEventually(t, "the store's Recover called", func() bool { return log.count("start slow/store") == 1 })

	removed := make(chan error, 1)
	go func() { removed <- m.RemoveChild(gCtx(t), "slow") }()
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	require.NoError(t, <-removed)
	err := <-added
	if err != nil {
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "answered, not timed out: %v", err)
	}
	assert.Equal(t, 1, log.count("stop slow/store"), "what started is shut down")
	assert.Zero(t, log.count("start slow/ctrl"), "nothing starts once the group is removed")
	_, ok := mustStatus(t, m).Child("slow")
	assert.False(t, ok)
}

// Groups added while the manager shuts down: each call either adds and
// starts its group (which the shutdown then stops) or is refused; every
// child that ran was shut down, once.
func TestGroupAddedDuringShutdown(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	gStart(t, m)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, refused int
	children := make([]gController, 20)
	for i := range children {
		children[i] = newGController(log, "g"+string(rune('a'+i))+"/ctrl")
	}
	for i, c := range children {
		wg.Go(func() {
			err := m.AddChild(gCtx(t), cm.NewGroup("g"+string(rune('a'+i)), cm.SupervisionSpec{}, c))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else {
				refused++
				assert.NotErrorIs(t, err, context.DeadlineExceeded)
			}
		})
	}
	m.ShutdownAndWait(gCtx(t))
	wg.Wait()
	assert.Equal(t, len(children), ok+refused)
	for _, c := range children {
		assert.Equal(t, c.runCount(), log.count("stop "+c.path), "%s: every Run shut down once", c.path)
	}
}

// A group added to a sharded manager starts only the controllers whose
// shard this replica holds; stores run while it holds one.
func TestGroupAddedAtRunTimeIsFenced(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	log := &gLog{}
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostReelect), Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	store, ctrl := newGStore(log, "t/store"), newGController(log, "t/ctrl")
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("t", cm.SupervisionSpec{}, store, ctrl)))
	assert.Equal(t, 1, ctrl.runCount())

	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", elLeaseDuration))
	elEventually(t, "the added group fenced", func() bool {
		return log.count("stop t/store") == 1 && log.count("stop t/ctrl") == 1
	})
	elEventually(t, "running again", func() bool { return mustStatus(t, m).Phase == cm.PhaseRunning })
	assert.Equal(t, 2, ctrl.runCount())
	assert.Equal(t, 2, store.runCount())
}

// AddShardedGroup: one group per shard, its controllers (at any depth)
// pinned to the shard; a stolen shard fences its group's controllers
// alone, and its stores run on while another shard is held.
func TestAddShardedGroupPinsEachGroupToItsShard(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	log := &gLog{}
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = 2
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	var mu sync.Mutex
	built := map[int][]*gChild{}
	m.AddShardedGroup("tenant", cm.SupervisionSpec{Strategy: cm.RestForOne}, func(sh cm.Shard) []cm.Runnable {
		p := fmt.Sprintf("tenant-%d/", sh.Index)
		store, ctrl, deep := newGStore(log, p+"store"), newGController(log, p+"ctrl"), newGController(log, p+"inner/ctrl")
		mu.Lock()
		built[sh.Index] = []*gChild{store.gChild, ctrl.gChild, deep.gChild}
		mu.Unlock()
		return []cm.Runnable{store, ctrl, cm.NewGroup("inner", cm.SupervisionSpec{}, deep)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	st := mustStatus(t, m)
	require.Len(t, st.Shards, 2)
	for i, sh := range st.Shards {
		assert.ElementsMatch(t, []string{fmt.Sprintf("tenant-%d/ctrl", i), fmt.Sprintf("tenant-%d/inner/ctrl", i)}, sh.Children, "shard %d", i)
	}
	elEventually(t, "every child running", func() bool {
		for i := range 2 {
			for _, c := range built[i] {
				if gState(t, m, c.path) != supervisor.StateRunning {
					return false
				}
			}
		}
		return true
	})

	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
	elEventually(t, "shard 1's controllers fenced", func() bool {
		return log.count("stop tenant-1/ctrl") == 1 && log.count("stop tenant-1/inner/ctrl") == 1
	})
	assert.Zero(t, log.count("stop tenant-0/ctrl"), "shard 0's group runs on")
	assert.Zero(t, log.count("stop tenant-0/inner/ctrl"))
	assert.Zero(t, log.count("stop tenant-1/store"), "a store runs while a shard is held")
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "tenant-0/ctrl"))
}

func TestAddShardedGroupBuildErrorsNameTheGroup(t *testing.T) {
	m := newManager(t, nil, gFast())
	m.AddShardedGroup("empty", cm.SupervisionSpec{}, func(cm.Shard) []cm.Runnable { return nil })
	m.AddShardedGroup("boom", cm.SupervisionSpec{}, func(cm.Shard) []cm.Runnable { panic("no tenants today") })
	err := m.Start(gCtx(t), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `group "empty-0" of AddShardedGroup: build returned no children`)
	assert.Contains(t, err.Error(), `group "boom-0" of AddShardedGroup: build panicked: no tenants today`)
}

// While the start round still recovers another group's store, a group
// whose store has recovered and whose controller has not started yet is
// Starting, not Running.
func TestGroupIsStartingUntilItsControllersStart(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	release := make(chan struct{})
	slow := newGStore(log, "b/store")
	slow.set(func(c *gChild) { c.hangRun = release })
	m.Add(cm.NewGroup("a", cm.SupervisionSpec{}, newGStore(log, "a/store"), newGController(log, "a/ctrl")),
		cm.NewGroup("b", cm.SupervisionSpec{}, slow))
	started := make(chan error, 1)
	go func() { started <- m.Start(gCtx(t), 0) }()
	gEventually(t, "a's store recovered, b's recovering", func() bool {
		return log.count("start b/store") == 1 && gState(t, m, "a/store") == supervisor.StateRunning
	})
	assert.Equal(t, supervisor.StatePending, gState(t, m, "a/ctrl"))
	assert.Equal(t, supervisor.StateStarting, gState(t, m, "a"))
	close(release)
	require.NoError(t, <-started)
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "a"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "b"))
}

// GetHealth lists every controller by its path, then each group's own
// line; a group stopped on its spent budget is healthy (a failing probe
// would restart the process) and says why it stopped, in GetHealth and
// in Status alike.
func TestGroupHealthLines(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	crash := newGController(log, "flaky/crash")
	crash.set(func(c *gChild) { c.failFrom, c.failTo = 2, 1<<30 })
	m.Add(newGController(log, "solo"),
		cm.NewGroup("flaky", cm.SupervisionSpec{MaxRestarts: 1, OnExhausted: cm.ExhaustedStop}, crash),
		cm.NewGroup("steady", cm.SupervisionSpec{}, cm.NewGroup("inner", cm.SupervisionSpec{}, newGController(log, "steady/inner/ctrl"))))
	gStart(t, m)
	names := func() []string {
		var out []string
		for _, h := range m.GetHealth() {
			out = append(out, h.Name)
		}
		return out
	}
	assert.Equal(t, []string{"solo", "flaky/crash", "steady/inner/ctrl", "flaky", "steady", "steady/inner"}, names())
	for _, h := range m.GetHealth() {
		assert.True(t, h.Healthy, "%s: %s", h.Name, h.Message)
	}

	crash.fail()
	gEventually(t, "flaky stopped on its budget", func() bool {
		cs, _ := mustStatus(t, m).Child("flaky")
		return cs.Group != nil && cs.Group.Exhausted
	})
	var line cm.HealthStatus
	for _, h := range m.GetHealth() {
		if h.Name == "flaky" {
			line = h
		}
	}
	assert.True(t, line.Healthy, "an exhausted group does not fail the probes")
	assert.Contains(t, line.Message, "stopped: ")
	assert.Contains(t, line.Message, "spent its restart budget")
	cs, _ := mustStatus(t, m).Child("flaky")
	assert.True(t, cs.Healthy)
	assert.Equal(t, line.Message, cs.Message)
}

// plainStore is a furiko Store: a name and Recover, no Shutdown.
type plainStore struct {
	name      string
	recovered chan struct{}
}

func (s *plainStore) Name() string { return s.name }
func (s *plainStore) Recover(context.Context) error {
	close(s.recovered)
	return nil
}

// StoreChild puts a Store without a Shutdown into a group; it is
// recovered as a store, before the group's controllers run.
func TestStoreChildInAGroup(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	st := &plainStore{name: "cache", recovered: make(chan struct{})}
	ctrl := newGController(log, "t/ctrl")
	m.Add(cm.NewGroup("t", cm.SupervisionSpec{}, ctrl, cm.StoreChild(st)))
	gStart(t, m)
	<-st.recovered
	cs, ok := mustStatus(t, m).Child("t/cache")
	require.True(t, ok)
	assert.Equal(t, actors.KindStore, cs.Kind)
	assert.Equal(t, supervisor.StateRunning, cs.State)
	// A Store that has a Shutdown is itself.
	withShutdown := newGStore(log, "x")
	assert.Equal(t, cm.Runnable(withShutdown), cm.StoreChild(withShutdown))
	require.NoError(t, m.RemoveChild(gCtx(t), "t"))
}
