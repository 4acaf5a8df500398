package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// Supervision trees through the public API: groups, their strategies and
// budgets, their paths, and the guarantees of the root at every depth.

// gLog is the order in which hosted calls began and ended, shared by a
// test's children: "start tenant-a/store", "stop tenant-a/store".
type gLog struct {
	mu      sync.Mutex
	entries []string
	ends    map[string]time.Time // when each child's last Shutdown returned
}

func (l *gLog) add(what, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, what+" "+name)
	if what == "stop" {
		if l.ends == nil {
			l.ends = map[string]time.Time{}
		}
		l.ends[name] = time.Now()
	}
}

func (l *gLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

func (l *gLog) count(entry string) int {
	n := 0
	for _, e := range l.snapshot() {
		if e == entry {
			n++
		}
	}
	return n
}

func (l *gLog) lastEnd() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, t := range l.ends {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// gChild is a controller or (gStore) a store: its start call logs "start
// <path>" and keeps the failure reporter; failRuns makes the start calls
// with those numbers fail; hang, when set, blocks Shutdown (or Run) until
// it is closed.
type gChild struct {
	path string // as the log names it
	name string
	log  *gLog

	mu           sync.Mutex
	runs         int
	report       func(error)
	failFrom     int // runs numbered failFrom..failTo fail (0: none)
	failTo       int
	hangShutdown <-chan struct{}
	hangRun      <-chan struct{}
}

func newGChild(log *gLog, path string) *gChild {
	return &gChild{path: path, name: path[strings.LastIndexByte(path, '/')+1:], log: log}
}

func (c *gChild) Name() string { return c.name }

func (c *gChild) start(ctx context.Context) error {
	c.mu.Lock()
	c.runs++
	n, hang := c.runs, c.hangRun
	c.report, _ = actors.FailureReporter(ctx)
	fail := c.failFrom > 0 && n >= c.failFrom && n <= c.failTo
	c.mu.Unlock()
	c.log.add("start", c.path)
	if hang != nil {
		<-hang // ignores its context
	}
	if fail {
		return fmt.Errorf("run %d of %s fails", n, c.path)
	}
	return nil
}

func (c *gChild) Shutdown(context.Context) {
	c.mu.Lock()
	hang := c.hangShutdown
	c.mu.Unlock()
	if hang != nil {
		<-hang
	}
	c.log.add("stop", c.path)
}

// fail reports a failure from the child's background work.
func (c *gChild) fail() {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	report(errors.New(c.path + " failed"))
}

func (c *gChild) set(f func(c *gChild)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *gChild) runCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

// gStore is a gChild hosted as a store.
type gStore struct{ *gChild }

func (s gStore) Recover(ctx context.Context) error { return s.start(ctx) }

func newGStore(log *gLog, path string) gStore { return gStore{newGChild(log, path)} }

// gController is a gChild hosted as a controller.
type gController struct{ *gChild }

func newGController(log *gLog, path string) gController { return gController{newGChild(log, path)} }

func (c gController) Run(ctx context.Context) error { return c.start(ctx) }

func (c gController) GetHealth() actors.HealthStatus {
	return actors.HealthStatus{Name: c.name, Healthy: true}
}

// gWebhook is a gChild hosted as a webhook.
type gWebhook struct{ *gChild }

func newGWebhook(log *gLog, path string) gWebhook { return gWebhook{newGChild(log, path)} }

func (w gWebhook) Start(ctx context.Context) error { return w.start(ctx) }
func (w gWebhook) Ready() bool                     { return true }
func (w gWebhook) Path() string                    { return "/" + w.name }
func (w gWebhook) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}

func gDuration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// gFast is the manager's supervision in these tests: restarts at once.
func gFast() *cm.SupervisionSpec {
	return &cm.SupervisionSpec{InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(5 * time.Millisecond)}
}

// gWait waits until exactly n events of typ name child (events reach a
// subscriber after the state they report).
func (r *recorder) gWait(t *testing.T, n int, typ cm.EventType, child string) {
	t.Helper()
	gEventually(t, fmt.Sprintf("%d %s of %q", n, typ, child), func() bool { return r.gCount(typ, child) >= n })
	assert.Equal(t, n, r.gCount(typ, child), "%s of %q", typ, child)
}

func gEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(wait)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("not within %s: %s", wait, what)
		}
	}
}

func gStart(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
}

func gState(t *testing.T, m *cm.ControllerManager, path string) supervisor.ChildState {
	t.Helper()
	cs, ok := mustStatus(t, m).Child(path)
	require.True(t, ok, "%q in Status", path)
	return cs.State
}

func (r *recorder) gCount(typ cm.EventType, child string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type == typ && e.Child == child {
			n++
		}
	}
	return n
}

// A RestForOne group over [store, reconciler, webhook] restarts all three
// when its store fails, stopped together and started again one after
// another in the order they were added; its sibling group is untouched.
func TestGroupRestForOneRestartsItsStoreAndWhatFollows(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	aStore, aRec, aHook := newGStore(log, "tenant-a/store"), newGController(log, "tenant-a/reconciler"), newGWebhook(log, "tenant-a/webhook")
	bStore, bRec := newGStore(log, "tenant-b/store"), newGController(log, "tenant-b/reconciler")
	m.Add(cm.NewGroup("tenant-a", cm.SupervisionSpec{Strategy: cm.RestForOne}, aStore, aRec, aHook),
		cm.NewGroup("tenant-b", cm.SupervisionSpec{}, bStore, bRec))
	gStart(t, m)
	started := len(log.snapshot())
	require.Equal(t, 5, started)

	aStore.fail()
	gEventually(t, "tenant-a restarted", func() bool { return aHook.runCount() == 2 && gState(t, m, "tenant-a") == supervisor.StateRunning })
	after := log.snapshot()[started:]
	require.Len(t, after, 6, "%v", after)
	assert.ElementsMatch(t, []string{"stop tenant-a/store", "stop tenant-a/reconciler", "stop tenant-a/webhook"}, after[:3])
	assert.Equal(t, []string{"start tenant-a/store", "start tenant-a/reconciler", "start tenant-a/webhook"}, after[3:])
	assert.Equal(t, 1, bStore.runCount())
	assert.Equal(t, 1, bRec.runCount())
	assert.Zero(t, log.count("stop tenant-b/store")+log.count("stop tenant-b/reconciler"))
	st := mustStatus(t, m)
	a, ok := st.Child("tenant-a")
	require.True(t, ok)
	assert.Equal(t, actors.KindGroup, a.Kind)
	require.Len(t, a.Children, 3)
	assert.Equal(t, "tenant-a/store", a.Children[0].Name)
	for _, c := range a.Children {
		assert.Equal(t, 1, c.Restarts, c.Name)
	}
	assert.Equal(t, cm.PhaseRunning, st.Phase)
}

// A crash-looping child spends its group's budget; with ExhaustedStop the
// group stops and stays stopped, reported by events and in Status, while
// its sibling runs on; StartChild starts it again.
func TestGroupExhaustedStopStopsTheGroupAlone(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	rec := record(m)
	crash, mate := newGController(log, "flaky/crash"), newGController(log, "flaky/mate")
	steady := newGController(log, "steady/ctrl")
	crash.set(func(c *gChild) { c.failFrom, c.failTo = 2, 1<<30 })
	m.Add(cm.NewGroup("flaky", cm.SupervisionSpec{MaxRestarts: 2, OnExhausted: cm.ExhaustedStop}, crash, mate),
		cm.NewGroup("steady", cm.SupervisionSpec{}, steady))
	gStart(t, m)

	crash.fail()
	gEventually(t, "flaky stopped", func() bool { return rec.gCount(cm.ChildStopped, "flaky") == 1 })
	assert.Equal(t, 3, crash.runCount(), "the first run, then two restarts that fail")
	rec.gWait(t, 1, cm.ChildFailed, "flaky")
	st := mustStatus(t, m)
	flaky, _ := st.Child("flaky")
	assert.Equal(t, supervisor.StateStopped, flaky.State)
	assert.Error(t, flaky.LastError)
	require.NotNil(t, flaky.Group)
	assert.Equal(t, supervisor.GroupStatus{Strategy: cm.OneForOne, MaxRestarts: 2, RestartWindow: flaky.Group.RestartWindow,
		ShutdownTimeout: flaky.Group.ShutdownTimeout, HealthInterval: 10 * time.Second, HealthTimeout: time.Second, UnhealthyThreshold: 3,
		StopOnExhausted: true, Exhausted: true, Spent: 2}, *flaky.Group)
	assert.Positive(t, flaky.Group.RestartWindow, "inherited from the manager")
	mateSt, _ := st.Child("flaky/mate")
	assert.Equal(t, supervisor.StateStopped, mateSt.State)
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "steady/ctrl"))
	assert.Equal(t, cm.PhaseRunning, st.Phase)
	assert.Equal(t, 1, steady.runCount())
	assert.Equal(t, 0, log.count("stop steady/ctrl"))

	// It stays stopped: nothing restarts it.
	runs := crash.runCount()
	assert.Equal(t, supervisor.StateStopped, gState(t, m, "flaky"))
	assert.Equal(t, runs, crash.runCount())

	crash.set(func(c *gChild) { c.failFrom = 0 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, m.StartChild(ctx, "flaky"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "flaky"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "flaky/crash"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "flaky/mate"))
	assert.Equal(t, 2, mate.runCount())
	flaky, _ = mustStatus(t, m).Child("flaky")
	require.NotNil(t, flaky.Group)
	assert.False(t, flaky.Group.Exhausted, "started again")
	assert.Zero(t, flaky.Group.Spent, "with a fresh budget")
}

// With ExhaustedEscalate a group whose budget is spent has failed, and its
// parent restarts it whole, once, counted once against its own budget.
func TestGroupExhaustedEscalateRestartsTheGroupOnce(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	rec := record(m)
	store, crash, mate := newGStore(log, "g/store"), newGController(log, "g/crash"), newGController(log, "g/mate")
	other := newGController(log, "other")
	// Its first restart fails too: the group's budget of one is spent.
	crash.set(func(c *gChild) { c.failFrom, c.failTo = 2, 2 })
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{MaxRestarts: 1}, store, crash, mate), other)
	gStart(t, m)
	n := len(log.snapshot())

	crash.fail()
	gEventually(t, "g restarted by the root", func() bool {
		return crash.runCount() == 3 && mate.runCount() == 2 && gState(t, m, "g") == supervisor.StateRunning
	})
	rec.gWait(t, 1, cm.ChildFailed, "g")
	rec.gWait(t, 1, cm.ChildRestarted, "g")
	g, _ := mustStatus(t, m).Child("g")
	assert.Equal(t, 1, g.Restarts)
	assert.Equal(t, 1, g.Failures)
	assert.Equal(t, 2, store.runCount(), "the group's restart recovers its store again")
	assert.Equal(t, 2, mate.runCount())
	assert.Equal(t, 1, other.runCount())
	// The group's restart starts its store first, then the others in order.
	var starts []string
	for _, e := range log.snapshot()[n:] {
		if strings.HasPrefix(e, "start ") {
			starts = append(starts, e)
		}
	}
	assert.Equal(t, []string{"start g/crash", "start g/store", "start g/crash", "start g/mate"}, starts)
	assert.Equal(t, cm.PhaseRunning, mustStatus(t, m).Phase)
}

// At the root, a group that fails past the root's budget escalates: the
// manager stops with an EscalationError naming the group.
func TestGroupExhaustedEscalatesAtTheRoot(t *testing.T) {
	log := &gLog{}
	sup := gFast()
	sup.MaxRestarts = 1
	m := newManager(t, nil, sup)
	rec := record(m)
	crash := newGController(log, "g/crash")
	crash.set(func(c *gChild) { c.failFrom, c.failTo = 2, 1<<30 })
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, crash), newGController(log, "other"))
	gStart(t, m)

	crash.fail()
	select {
	case <-m.Done():
	case <-time.After(wait):
		t.Fatal("the manager did not escalate")
	}
	var esc *supervisor.EscalationError
	require.ErrorAs(t, m.Err(), &esc)
	assert.Equal(t, "g", esc.Child)
	assert.Equal(t, actors.KindGroup, esc.Kind)
	rec.gWait(t, 1, cm.ChildRestarted, "g")
	rec.gWait(t, 1, cm.Escalated, "g")
	// g restarted crash once, the root restarted g (a run), g restarted it once more.
	assert.Equal(t, 4, crash.runCount())
}

// Paths at depth 3: Status, events, GetHealth and the lifecycle calls
// name a child by its path; each level's stores recover before its
// other children, and after its parent's.
func TestGroupDepthThreePaths(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	rec := record(m)
	ctrl := newGController(log, "a/b/c/ctrl")
	m.Add(newGStore(log, "store"),
		cm.NewGroup("a", cm.SupervisionSpec{},
			newGController(log, "a/ctrl"),
			cm.NewGroup("b", cm.SupervisionSpec{Strategy: cm.AllForOne},
				newGStore(log, "a/b/store"),
				cm.NewGroup("c", cm.SupervisionSpec{}, newGStore(log, "a/b/c/store"), ctrl)),
			newGStore(log, "a/store")))
	gStart(t, m)
	entries := log.snapshot()
	pos := func(e string) int { i := slices.Index(entries, e); require.GreaterOrEqual(t, i, 0, e); return i }
	assert.Less(t, pos("start store"), pos("start a/store"))
	assert.Less(t, pos("start a/store"), pos("start a/b/store"))
	assert.Less(t, pos("start a/b/store"), pos("start a/b/c/store"))
	assert.Less(t, pos("start a/b/c/store"), pos("start a/b/c/ctrl"))
	assert.Less(t, pos("start a/store"), pos("start a/ctrl"))

	st := mustStatus(t, m)
	require.Len(t, st.Children, 2)
	assert.Equal(t, "a", st.Children[1].Name)
	cs, ok := st.Child("a/b/c/ctrl")
	require.True(t, ok)
	assert.Equal(t, actors.KindController, cs.Kind)
	assert.Equal(t, supervisor.StateRunning, cs.State)
	c, ok := st.Child("a/b/c")
	require.True(t, ok)
	assert.Equal(t, actors.KindGroup, c.Kind)
	assert.Equal(t, []string{"a/b/c/store", "a/b/c/ctrl"}, []string{c.Children[0].Name, c.Children[1].Name})
	rec.gWait(t, 1, cm.ChildStarted, "a/b/c/ctrl")
	var names []string
	for _, h := range m.GetHealth() {
		names = append(names, h.Name)
	}
	assert.Equal(t, []string{"a/ctrl", "a/b/c/ctrl", "a", "a/b", "a/b/c"}, names, "the controllers, then each group's own line")

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// RestartChild of a group restarts it whole, stores first.
	n := len(log.snapshot())
	require.NoError(t, m.RestartChild(ctx, "a/b"))
	var starts []string
	for _, e := range log.snapshot()[n:] {
		if strings.HasPrefix(e, "start ") {
			starts = append(starts, e)
		}
	}
	assert.Equal(t, []string{"start a/b/store", "start a/b/c/store", "start a/b/c/ctrl"}, starts)
	assert.Equal(t, 2, ctrl.runCount())
	require.NoError(t, m.RestartChild(ctx, "a/b/c/ctrl"))
	assert.Equal(t, 3, ctrl.runCount())
	require.NoError(t, m.StopChild(ctx, "a/b/c"))
	assert.Equal(t, supervisor.StateStopped, gState(t, m, "a/b/c/ctrl"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "a/ctrl"))
	require.NoError(t, m.StartChild(ctx, "a/b/c"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "a/b/c/ctrl"))
	assert.ErrorIs(t, m.RestartChild(ctx, "a/nope"), cm.ErrUnknownChild)

	// AddChild into a group.
	added := newGController(log, "a/b/added")
	_, err := m.Request(ctx, supervisor.AddChild{Parent: "a/b", Runnable: added})
	require.NoError(t, err)
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "a/b/added"))
	rec.gWait(t, 1, cm.ChildStarted, "a/b/added")
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("late", cm.SupervisionSpec{})), "an empty group, added while running")
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "late"))
}

// "/" is not allowed in a name once groups are used; names are unique
// among siblings.
func TestGroupNamesAreValidated(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	m.Add(cm.NewGroup("a/b", cm.SupervisionSpec{}, newGController(log, "x")))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	assert.ErrorContains(t, m.Start(ctx, 0), `"/" is not allowed`)

	m2 := newManager(t, nil, gFast())
	m2.Add(cm.NewGroup("a", cm.SupervisionSpec{}, newGController(log, "a/x"), newGController(log, "a/x")))
	assert.ErrorContains(t, m2.Start(ctx, 0), `both named "a/x"`)
}

// startHungGroup starts a manager whose ShutdownTimeout is manager with
// group "g" (AllForOne, ShutdownTimeout group: 0 inherits) of "g/first"
// and "g/hung", whose Shutdown hangs until the test ends; it returns
// g/first and the manager's events.
func startHungGroup(t *testing.T, manager, group time.Duration) (gController, *recorder) {
	first, _, _, rec := startHungGroupIn(t, manager, cm.SupervisionSpec{Strategy: cm.AllForOne, ShutdownTimeout: gDuration(group)})
	return first, rec
}

// hungRig is a manager with its events, and a release (free, also done
// when the test ends) for the Shutdowns hang makes wait.
type hungRig struct {
	m       *cm.ControllerManager
	rec     *recorder
	log     *gLog
	release chan struct{}
	free    func()
}

// newHungRig makes a hungRig whose manager's ShutdownTimeout is manager,
// restarting at once (gFast).
func newHungRig(t *testing.T, manager time.Duration) *hungRig {
	sup := gFast()
	sup.ShutdownTimeout = gDuration(manager)
	m := newManager(t, nil, sup)
	h := &hungRig{m: m, rec: record(m), log: &gLog{}, release: make(chan struct{})}
	var once sync.Once
	h.free = func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(h.free)
	return h
}

// hang makes c's Shutdown wait, whatever its context says, until free.
func (h *hungRig) hang(c gController) gController {
	c.set(func(x *gChild) { x.hangShutdown = h.release })
	return c
}

// startHungGroupIn is startHungGroup with the group's spec, a controller
// "steady" at the root beside it, and the manager and hung's release
// (also closed when the test ends) returned.
func startHungGroupIn(t *testing.T, manager time.Duration, spec cm.SupervisionSpec) (gController, *cm.ControllerManager, func(), *recorder) {
	h := newHungRig(t, manager)
	first, hung := newGController(h.log, "g/first"), h.hang(newGController(h.log, "g/hung"))
	h.m.Add(cm.NewGroup("g", spec, first, hung), newGController(h.log, "steady"))
	gStart(t, h.m)
	return first, h.m, h.free, h.rec
}

// A child in a group whose Shutdown hangs during the group's restart
// escalates within ShutdownTimeout.
func TestGroupHangingShutdownDuringARestartEscalates(t *testing.T) {
	first, rec := startHungGroup(t, 200*time.Millisecond, 0)

	failedAt := time.Now()
	first.fail()
	gEventually(t, "escalated", func() bool { return rec.gCount(cm.Escalated, "g/hung") == 1 })
	assert.Less(t, time.Since(failedAt), 200*time.Millisecond+time.Second)
	assert.Equal(t, 1, first.runCount(), "nothing started again beside the hung incarnation")
}

// The escalation of a restart whose Shutdown hangs names where it is
// stuck: an *UnstoppedError with the stack of the hung call.
func TestGroupHangingShutdownEscalationCarriesItsStack(t *testing.T) {
	first, rec := startHungGroup(t, time.Hour, 200*time.Millisecond)

	first.fail()
	gEventually(t, "escalated", func() bool { return rec.gCount(cm.Escalated, "g/hung") == 1 })
	var uerr *supervisor.UnstoppedError
	require.ErrorAs(t, rec.firstErr(cm.Escalated, "g/hung"), &uerr)
	require.Len(t, uerr.Children, 1)
	assert.Equal(t, "g/hung", uerr.Children[0].Name)
	assert.Contains(t, uerr.Children[0].Stack, "(*gChild).Shutdown")
}

// A group's own ShutdownTimeout bounds its restarts, not the manager's:
// with the manager's an hour, a Shutdown that hangs during the group's
// restart escalates, and says the group's bound.
func TestGroupShutdownTimeoutBoundsItsOwnRestarts(t *testing.T) {
	first, rec := startHungGroup(t, time.Hour, 200*time.Millisecond)

	first.fail()
	gEventually(t, "escalated", func() bool { return rec.gCount(cm.Escalated, "g/hung") == 1 })
	var esc *supervisor.EscalationError
	for _, e := range rec.snapshot() {
		if e.Type == cm.Escalated {
			require.ErrorAs(t, e.Err, &esc)
		}
	}
	assert.ErrorContains(t, esc, "Shutdown did not return within 200ms during a restart")
	assert.Equal(t, 1, first.runCount(), "nothing started again beside the hung incarnation")
}

// A Shutdown that hangs during the restart of a group that stops on its
// own (ExhaustedStop, a fleet member's) fails that group alone: the group
// stops, the hung child stays Stopping and nothing starts beside it, the
// manager goes on; once the Shutdown returns the group is Stopped, and
// StartChild starts it again.
func TestGroupHangingShutdownInAStopGroupStopsTheGroupAlone(t *testing.T) {
	first, m, free, rec := startHungGroupIn(t, time.Hour, cm.SupervisionSpec{Strategy: cm.AllForOne,
		OnExhausted: cm.ExhaustedStop, ShutdownTimeout: gDuration(200 * time.Millisecond)})

	first.fail()
	gEventually(t, "g failed", func() bool { return rec.gCount(cm.ChildFailed, "g") == 1 })
	gerr := rec.firstErr(cm.ChildFailed, "g")
	assert.ErrorContains(t, gerr, `group "g": controller "g/hung": Shutdown did not return within 200ms during a restart`)
	var uerr *supervisor.UnstoppedError
	require.ErrorAs(t, gerr, &uerr, "it names where the Shutdown is stuck")
	require.Len(t, uerr.Children, 1)
	assert.Equal(t, "g/hung", uerr.Children[0].Name)
	assert.Contains(t, uerr.Children[0].Stack, "(*gChild).Shutdown")
	gEventually(t, "g/first stopped", func() bool { return gState(t, m, "g/first") == supervisor.StateStopped })
	st := mustStatus(t, m)
	assert.Equal(t, cm.PhaseRunning, st.Phase)
	g, _ := st.Child("g")
	assert.Equal(t, supervisor.StateStopping, g.State, "its hung child keeps it stopping")
	require.NotNil(t, g.Group)
	assert.True(t, g.Group.Exhausted)
	assert.Equal(t, supervisor.StateStopping, gState(t, m, "g/hung"))
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "steady"))
	assert.Equal(t, 1, first.runCount(), "nothing started again beside the hung incarnation")
	assert.Zero(t, rec.gCount(cm.Escalated, "g/hung"))
	busyCtx, busyCancel := context.WithTimeout(context.Background(), wait)
	defer busyCancel()
	assert.ErrorIs(t, m.StartChild(busyCtx, "g"), supervisor.ErrBusy, "not started while a Shutdown in it runs")
	assert.Equal(t, 1, first.runCount())

	free()
	gEventually(t, "g stopped", func() bool { return rec.gCount(cm.ChildStopped, "g") == 1 })
	assert.Equal(t, 1, first.runCount(), "the group stays stopped once the Shutdown has returned")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, m.StartChild(ctx, "g"))
	assert.Equal(t, 2, first.runCount())
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "g/hung"))
	assert.Zero(t, rec.gCount(cm.Escalated, "g/hung"))
}

// A child that restarts itself with its restart ticket (a fixed backoff
// gives one) and whose Shutdown hangs is contained as well, with the stack
// of its Shutdown: the ticket is taken back, so it does not start once the
// Shutdown returns.
func TestGroupHangingShutdownWithARestartTicketIsContained(t *testing.T) {
	h := newHungRig(t, time.Hour)
	m, rec, free := h.m, h.rec, h.free
	hung := h.hang(newGController(h.log, "g/hung"))
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{OnExhausted: cm.ExhaustedStop, ShutdownTimeout: gDuration(200 * time.Millisecond),
		InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(time.Millisecond)}, hung))
	gStart(t, m)

	hung.fail()
	gEventually(t, "g failed", func() bool { return rec.gCount(cm.ChildFailed, "g") == 1 })
	var uerr *supervisor.UnstoppedError
	require.ErrorAs(t, rec.firstErr(cm.ChildFailed, "g"), &uerr, "the Shutdown it ran on its own ticket is watched too")
	require.Len(t, uerr.Children, 1)
	assert.Equal(t, "g/hung", uerr.Children[0].Name)
	assert.Contains(t, uerr.Children[0].Stack, "(*gChild).Shutdown")
	free()
	gEventually(t, "g stopped", func() bool { return rec.gCount(cm.ChildStopped, "g") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, m.StartChild(ctx, "g"))
	assert.Equal(t, 2, hung.runCount(), "its first run and the StartChild's: the ticket's start was taken back")
	assert.Zero(t, rec.gCount(cm.Escalated, "g/hung"))
}

// Contained by the nearest group that stops on its own, at any depth: a
// hung Shutdown in an escalating group inside one stops the outer group.
func TestGroupHangingShutdownIsContainedByTheNearestStopGroup(t *testing.T) {
	h := newHungRig(t, time.Hour)
	m, rec, log := h.m, h.rec, h.log
	first, hung := newGController(log, "outer/inner/first"), h.hang(newGController(log, "outer/inner/hung"))
	inner := cm.NewGroup("inner", cm.SupervisionSpec{Strategy: cm.AllForOne, ShutdownTimeout: gDuration(200 * time.Millisecond)}, first, hung)
	m.Add(cm.NewGroup("outer", cm.SupervisionSpec{OnExhausted: cm.ExhaustedStop}, inner), newGController(log, "steady"))
	gStart(t, m)

	first.fail()
	gEventually(t, "outer failed", func() bool { return rec.gCount(cm.ChildFailed, "outer") == 1 })
	gEventually(t, "outer/inner/first stopped", func() bool { return gState(t, m, "outer/inner/first") == supervisor.StateStopped })
	assert.Equal(t, cm.PhaseRunning, mustStatus(t, m).Phase)
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "steady"))
	assert.Equal(t, 1, first.runCount())
	assert.Zero(t, rec.gCount(cm.Escalated, "outer/inner/hung"))
}

// shutdownDeadline is a controller that records how long its Shutdown's
// context had left when the Shutdown was called.
type shutdownDeadline struct {
	name string
	left chan time.Duration
}

func (c *shutdownDeadline) Name() string              { return c.name }
func (c *shutdownDeadline) Run(context.Context) error { return nil }
func (c *shutdownDeadline) Shutdown(ctx context.Context) {
	left := time.Duration(-1) // no deadline
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	c.left <- left
}
func (c *shutdownDeadline) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

// A StopChild, RemoveChild or RestartChild is bounded by the
// ShutdownTimeout of the level the child is in: a group's own, inherited
// by a group inside it that sets none; a group itself, stopped as a child
// of the manager, by the manager's. Status shows each group's.
func TestGroupShutdownTimeoutBoundsTheStopsOfItsChildren(t *testing.T) {
	sup := gFast()
	sup.ShutdownTimeout = gDuration(time.Hour)
	m := newManager(t, nil, sup)
	a := &shutdownDeadline{name: "a", left: make(chan time.Duration, 4)}
	b := &shutdownDeadline{name: "b", left: make(chan time.Duration, 4)}
	m.Add(cm.NewGroup("outer", cm.SupervisionSpec{ShutdownTimeout: gDuration(200 * time.Millisecond)},
		cm.NewGroup("inner", cm.SupervisionSpec{}, a), b))
	gStart(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	st := mustStatus(t, m)
	for _, path := range []string{"outer", "outer/inner"} {
		g, ok := st.Child(path)
		require.True(t, ok, path)
		require.NotNil(t, g.Group, path)
		assert.Equal(t, 200*time.Millisecond, g.Group.ShutdownTimeout, path)
	}

	require.NoError(t, m.RestartChild(ctx, "outer/inner/a"))
	left := <-a.left
	assert.True(t, left >= 0 && left <= 200*time.Millisecond, "RestartChild of a child of inner: %s left, want the 200ms inner inherits", left)
	require.NoError(t, m.StopChild(ctx, "outer/b"))
	left = <-b.left
	assert.True(t, left >= 0 && left <= 200*time.Millisecond, "StopChild of a child of outer: %s left, want outer's 200ms", left)
	require.NoError(t, m.StopChild(ctx, "outer"))
	left = <-a.left
	assert.Greater(t, left, 30*time.Minute, "StopChild of outer, a child of the manager: want the manager's hour")
}

// A Run that ignores its context, in a group: the start timeout still
// bounds Start, which fails with context.DeadlineExceeded.
func TestGroupRunIgnoringItsContext(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	stuck := newGController(log, "g/stuck")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stuck.set(func(c *gChild) { c.hangRun = release })
	other := newGController(log, "h/other")
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, newGStore(log, "g/store"), stuck), cm.NewGroup("h", cm.SupervisionSpec{}, other))
	began := time.Now()
	err := m.Start(context.Background(), 200*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(began), 200*time.Millisecond+time.Second)
	gEventually(t, "what started is shut down", func() bool { return log.count("stop g/store") == 1 })
}

// A lost lease fences the controllers and stores of every group, webhooks
// in a group stay up; a shutdown releases the lease only once every one
// of them has stopped.
func TestGroupLostLeaseFencesEveryGroup(t *testing.T) {
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
	fenced := []*gChild{newGStore(log, "g1/store").gChild, newGController(log, "g1/ctrl").gChild,
		newGStore(log, "g2/g3/store").gChild, newGController(log, "g2/g3/ctrl").gChild}
	hook := newGWebhook(log, "g2/hook")
	m.Add(cm.NewGroup("g1", cm.SupervisionSpec{}, gStore{fenced[0]}, gController{fenced[1]}),
		cm.NewGroup("g2", cm.SupervisionSpec{}, cm.NewGroup("g3", cm.SupervisionSpec{}, gStore{fenced[2]}, gController{fenced[3]}), hook))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))

	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", elLeaseDuration))
	elEventually(t, "every controller and store fenced", func() bool {
		for _, c := range fenced {
			if log.count("stop "+c.path) != 1 {
				return false
			}
		}
		return true
	})
	elEventually(t, "back to Electing", func() bool { return mustStatus(t, m).Phase == cm.PhaseElecting })
	assert.Zero(t, log.count("stop g2/hook"), "a webhook in a group stays up")
	for _, c := range fenced {
		assert.NotEqual(t, supervisor.StateRunning, gState(t, m, c.path), c.path)
	}
	assert.Equal(t, supervisor.StateRunning, gState(t, m, "g2/hook"))

	// Elected again once the thief's lease expires; then a shutdown
	// releases the lease after every child has stopped.
	elEventually(t, "running again", func() bool { return mustStatus(t, m).Phase == cm.PhaseRunning })
	for _, c := range fenced {
		assert.Equal(t, 2, c.runCount(), c.path)
	}
	m.ShutdownAndWait(ctx)
	require.NoError(t, m.Err())
	lastStop := log.lastEnd()
	var released time.Time
	for _, w := range srv.History() {
		if w.Name == elLeaseName && w.Holder == "" && w.Client == "a" {
			released = w.Time
		}
	}
	require.False(t, released.IsZero(), "the lease was released")
	assert.False(t, released.Before(lastStop), "released %s before the last Shutdown returned %s", released, lastStop)
}

// Failures go up one level at a time: an inner group whose budget is
// spent is restarted by its outer group, once, and the outer group's own
// standing (its failures, its restarts) and its other children are
// untouched.
func TestGroupNestedEscalationStopsAtTheParent(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	rec := record(m)
	crash, sib := newGController(log, "outer/inner/crash"), newGController(log, "outer/sib")
	crash.set(func(c *gChild) { c.failFrom, c.failTo = 2, 2 })
	m.Add(cm.NewGroup("outer", cm.SupervisionSpec{},
		cm.NewGroup("inner", cm.SupervisionSpec{MaxRestarts: 1}, crash), sib))
	gStart(t, m)

	crash.fail()
	gEventually(t, "inner restarted by outer", func() bool {
		return crash.runCount() == 3 && gState(t, m, "outer/inner") == supervisor.StateRunning
	})
	rec.gWait(t, 1, cm.ChildFailed, "outer/inner")
	rec.gWait(t, 1, cm.ChildRestarted, "outer/inner")
	st := mustStatus(t, m)
	inner, _ := st.Child("outer/inner")
	assert.Equal(t, 1, inner.Restarts)
	outer, _ := st.Child("outer")
	assert.Zero(t, outer.Failures)
	assert.Zero(t, outer.Restarts)
	assert.Equal(t, 1, sib.runCount())
	assert.Equal(t, cm.PhaseRunning, st.Phase)
	assert.Zero(t, rec.gCount(cm.ChildFailed, "outer"))
}
