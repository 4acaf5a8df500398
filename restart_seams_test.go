package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// The seams of a restart on request (issue 34 §3): a RestartChild meeting
// a StopChild or RemoveChild of the same child, a group's restart meeting a
// re-election or a shard won back, a re-election's new Run, and AddChild
// under a group of AddShardedGroup. Each goes through the public API.

// seamLog is the order of the children's calls, shared by a test's
// children: "start g/c 2" when Run (Recover, Start) number 2 of g/c
// began, "started g/c 2" when it returned, "stop g/c 1" when Shutdown
// number 1 returned.
type seamLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *seamLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
}

func (l *seamLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// index is where entry is in the log, -1 if absent.
func (l *seamLog) index(entry string) int { return slices.Index(l.snapshot(), entry) }

// seamChild is a controller, store or webhook (seamController, seamStore,
// seamWebhook) whose n-th start call runs onRun[n] when set (else returns
// at once) and whose n-th Shutdown waits for holdStop[n] when set.
type seamChild struct {
	path, name string
	log        *seamLog

	mu        sync.Mutex
	runs      int
	shutdowns int
	report    func(error)
	onRun     map[int]func(ctx context.Context) error
	holdStop  map[int]chan struct{}
	// lastly[n] runs as Shutdown n returns, on its goroutine.
	lastly map[int]func()
}

func newSeamChild(log *seamLog, parent, name string) *seamChild {
	path := name
	if parent != "" {
		path = parent + "/" + name
	}
	return &seamChild{path: path, name: name, log: log, onRun: map[int]func(context.Context) error{}, holdStop: map[int]chan struct{}{},
		lastly: map[int]func(){}}
}

func (c *seamChild) Name() string { return c.name }

func (c *seamChild) start(ctx context.Context) error {
	c.mu.Lock()
	c.runs++
	n, hook := c.runs, c.onRun[c.runs]
	c.report, _ = actors.FailureReporter(ctx)
	c.mu.Unlock()
	c.log.add("start %s %d", c.path, n)
	var err error
	if hook != nil {
		err = hook(ctx)
	}
	c.log.add("started %s %d", c.path, n)
	return err
}

func (c *seamChild) Shutdown(context.Context) {
	c.mu.Lock()
	n := c.shutdowns + 1
	hold, lastly := c.holdStop[n], c.lastly[n]
	c.mu.Unlock()
	if hold != nil {
		<-hold
	}
	c.mu.Lock()
	c.shutdowns++
	c.mu.Unlock()
	c.log.add("stop %s %d", c.path, n)
	if lastly != nil {
		lastly()
	}
}

func (c *seamChild) counts() (runs, shutdowns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.shutdowns
}

func (c *seamChild) runCount() int {
	runs, _ := c.counts()
	return runs
}

// setRun makes start call n run hook.
func (c *seamChild) setRun(n int, hook func(ctx context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onRun[n] = hook
}

// holdShutdown makes Shutdown n wait until the returned function is called.
func (c *seamChild) holdShutdown(t *testing.T, n int) (release func()) {
	hold := make(chan struct{})
	c.mu.Lock()
	c.holdStop[n] = hold
	c.mu.Unlock()
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	return release
}

// blockRun makes start call n signal entered, then wait until release is
// called or its context ends (then it returns the context's error).
func (c *seamChild) blockRun(t *testing.T, n int) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	c.setRun(n, func(ctx context.Context) error {
		close(in)
		select {
		case <-out:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	release = sync.OnceFunc(func() { close(out) })
	t.Cleanup(release)
	return in, release
}

func (c *seamChild) fail() {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	report(errors.New(c.path + " failed"))
}

type seamController struct{ *seamChild }

func (c seamController) Run(ctx context.Context) error { return c.start(ctx) }
func (c seamController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

type seamStore struct{ *seamChild }

func (s seamStore) Recover(ctx context.Context) error { return s.start(ctx) }

type seamWebhook struct{ *seamChild }

func (w seamWebhook) Start(ctx context.Context) error { return w.start(ctx) }
func (w seamWebhook) Ready() bool                     { return true }
func (w seamWebhook) Path() string                    { return "/" + w.path }
func (w seamWebhook) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}

// seamManager is a manager with fast restarts, election on srv's Lease
// (shards > 1: sharded) when srv is not nil, whose cleanup shuts it down.
func seamManager(t *testing.T, srv *leasetest.Server, shards int32) *cm.ControllerManager {
	t.Helper()
	cfg := cm.ControllerManagerConfigSpec{Supervision: gFast()}
	host := cm.NewContext(nil)
	if srv != nil {
		cfg.LeaderElection = elSpec(cm.LeaseLostReelect)
		cfg.LeaderElection.Shards = shards
		host = cm.NewContext(srv.Client("a"))
	}
	m, err := cm.NewControllerManager(host, cfg, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m
}

// seamCall runs call in a goroutine; its result comes on the channel.
func seamCall(call func(ctx context.Context) error) <-chan error {
	out := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		out <- call(ctx)
	}()
	return out
}

// seamResult waits for a call's result.
func seamResult(t *testing.T, what string, res <-chan error) error {
	t.Helper()
	return recvWithin(t, res, what+": no answer")
}

// recvWithin receives from ch, and fails the test (saying what did not
// come) after elWait.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(elWait):
		t.Fatalf("%s within %s", what, elWait)
		var zero T
		return zero
	}
}

// seamReached waits for ch to close.
func seamReached(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(elWait):
		t.Fatalf("not within %s: %s", elWait, what)
	}
}

// seamShutdown shuts m down, and fails unless it stopped within elWait
// with Err nil.
func seamShutdown(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	m.ShutdownAndWait(ctx)
	select {
	case <-m.Done():
	default:
		t.Fatal("ShutdownAndWait returned and Done is open")
	}
	assert.NoError(t, m.Err())
}

// seamBooks checks that Status counts every start call of each child but
// its first as a restart, once the manager has stopped, and that every
// incarnation was shut down once.
func seamBooks(t *testing.T, m *cm.ControllerManager, children ...*seamChild) {
	t.Helper()
	st := mustStatus(t, m)
	for _, c := range children {
		runs, shutdowns := c.counts()
		cs, ok := st.Child(c.path)
		if !ok {
			continue // removed
		}
		assert.Equal(t, runs-1, cs.Restarts, "%s: Restarts = runs - 1", c.path)
		assert.Equal(t, runs, shutdowns, "%s: every incarnation shut down once", c.path)
	}
}

// noFailures fails for any ChildFailed rec saw.
func noFailures(t *testing.T, rec *recorder) {
	t.Helper()
	for _, e := range rec.snapshot() {
		if e.Type == cm.ChildFailed {
			t.Errorf("ChildFailed %s: %v", e.Child, e.Err)
		}
	}
}

// A StopChild or RemoveChild of a child (or of its group) that a
// RestartChild is restarting reaches the restart: RestartChild answers at
// once with ErrChildStopped or ErrChildRemoved, the child never runs
// again, and nothing is left running after ShutdownAndWait.
func TestRestartChildMeetsStopOrRemove(t *testing.T) {
	for _, tc := range []struct {
		name     string
		group    bool // RestartChild and the stop name the group "g"
		remove   bool
		starting bool // the stop comes while Run 2 runs, not while Shutdown 1 does
	}{
		{name: "RemoveChild while its Shutdown runs", remove: true},
		{name: "StopChild while its Shutdown runs"},
		{name: "RemoveChild while its Run starts again", remove: true, starting: true},
		{name: "StopChild while its Run starts again", starting: true},
		{name: "RemoveChild of its group while its Shutdown runs", group: true, remove: true},
		{name: "StopChild of its group while its Shutdown runs", group: true},
		{name: "RemoveChild of its group while its Run starts again", group: true, remove: true, starting: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := &seamLog{}
			m := seamManager(t, nil, 0)
			rec := record(m)
			parent := ""
			if tc.group {
				parent = "g"
			}
			c := newSeamChild(log, parent, "c")
			if tc.group {
				m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, seamController{c}))
			} else {
				m.Add(seamController{c})
			}
			gStart(t, m)
			target := c.path
			if tc.group {
				target = "g"
			}

			var reached <-chan struct{}
			var release func()
			if tc.starting {
				reached, release = c.blockRun(t, 2)
			} else {
				release = c.holdShutdown(t, 1)
			}
			restarted := seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, target) })
			if tc.starting {
				seamReached(t, "Run 2 under way", reached)
			} else {
				gEventually(t, "the restart stops it", func() bool { return gState(t, m, c.path) == supervisor.StateStopping })
			}

			stopped := seamCall(func(ctx context.Context) error {
				if tc.remove {
					return m.RemoveChild(ctx, target)
				}
				return m.StopChild(ctx, target)
			})
			want := cm.ErrChildStopped
			if tc.remove {
				want = cm.ErrChildRemoved
			}
			// Answered when the stop reaches it, before the child has stopped.
			err := seamResult(t, "RestartChild", restarted)
			require.ErrorIs(t, err, want, "RestartChild says why it did not restart")
			release()
			require.NoError(t, seamResult(t, "the stop", stopped))

			runsBefore := c.runCount()
			if tc.remove {
				gEventually(t, "removed", func() bool { return rec.count(cm.ChildRemoved, target) == 1 })
				_, still := mustStatus(t, m).Child(c.path)
				assert.False(t, still, "removed from Status")
			} else {
				assert.Equal(t, supervisor.StateStopped, gState(t, m, target))
			}
			seamShutdown(t, m)
			runs, shutdowns := c.counts()
			assert.Equal(t, runsBefore, runs, "a removed or stopped child never runs again")
			assert.Equal(t, runs, shutdowns, "every incarnation shut down once")
			if tc.group && !tc.starting {
				assert.Zero(t, rec.count(cm.ChildRestarted, "g"), "nothing of the group started again: no ChildRestarted")
			}
			noFailures(t, rec)
			seamBooks(t, m, c)
		})
	}
}

// A RestartChild of one hosted child sends its restart with the Stop, so
// the child starts again on its own once Shutdown returns. A StopChild or
// RemoveChild sent at that very moment (from the Shutdown's last line, so
// that the root takes it before the child's Stopped) meets the restart
// either before the child has taken it (the child stays stopped) or just
// after (the new incarnation is adopted and stopped); both orders happen,
// and either way RestartChild answers ErrChildStopped or ErrChildRemoved,
// the child runs no start call once the stop has ended, every incarnation
// is shut down once, and Restarts = runs - 1.
func TestRestartChildMeetsAStopAsItsShutdownReturns(t *testing.T) {
	for _, remove := range []bool{false, true} {
		name := "StopChild"
		if remove {
			name = "RemoveChild"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			log := &seamLog{}
			m := seamManager(t, nil, 0)
			rec := record(m)
			c := newSeamChild(log, "", "c")
			m.Add(seamController{c})
			gStart(t, m)

			c.mu.Lock()
			c.lastly[1] = func() {
				if remove {
					m.Send(supervisor.RemoveChild{Name: "c"})
				} else {
					m.Send(supervisor.StopChild{Name: "c"})
				}
			}
			c.mu.Unlock()
			want := cm.ErrChildStopped
			if remove {
				want = cm.ErrChildRemoved
			}
			err := seamResult(t, "RestartChild", seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "c") }))
			require.ErrorIs(t, err, want, "RestartChild says why it did not restart")

			if remove {
				gEventually(t, "removed", func() bool { return rec.count(cm.ChildRemoved, "c") == 1 })
			} else {
				gEventually(t, "stopped", func() bool { return gState(t, m, "c") == supervisor.StateStopped })
			}
			runsBefore, _ := c.counts()
			t.Logf("start calls before the stop ended: %d (2: the child had taken the restart)", runsBefore)
			seamShutdown(t, m)
			runs, shutdowns := c.counts()
			assert.Equal(t, runsBefore, runs, "no start call once the stop has ended")
			assert.Equal(t, runs, shutdowns, "every incarnation shut down once")
			noFailures(t, rec)
			seamBooks(t, m, c)
		})
	}
}

// seamEvents counts rec's events of typ for shard (ShardAcquired, ShardLost).
func seamShardEvents(rec *recorder, typ cm.EventType, shard int) int {
	n := 0
	for _, e := range rec.snapshot() {
		if e.Type == typ && e.Shard == shard {
			n++
		}
	}
	return n
}

// A group's RestartChild waiting on a slow start call (a webhook's Start,
// a store's Recover) while the lease is stolen and won back: the children
// it had still to start are the next start round's, started once; the
// request answers, saying the lease was lost meanwhile; no failure is
// counted; ShutdownAndWait completes.
func TestGroupRestartMeetsReelection(t *testing.T) {
	for _, slow := range []string{"webhook", "store"} {
		t.Run(slow, func(t *testing.T) {
			t.Parallel()
			srv, log := leasetest.NewServer(), &seamLog{}
			m := seamManager(t, srv, 0)
			rec := record(m)
			first, ctrl := newSeamChild(log, "g", slow), newSeamChild(log, "g", "ctrl")
			var firstChild cm.Runnable = seamWebhook{first}
			if slow == "store" {
				firstChild = seamStore{first}
			}
			m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, firstChild, seamController{ctrl}))
			gStart(t, m)
			entered, release := first.blockRun(t, 2)

			restarted := seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "g") })
			seamReached(t, "the group's restart waits on "+slow, entered)
			require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", elLeaseDuration))
			gEventually(t, "the lease lost", func() bool { return rec.count(cm.LeaderLost, "") == 1 })
			gEventually(t, "elected again and running", func() bool {
				return rec.count(cm.LeaderElected, "") == 2 && mustStatus(t, m).Phase == cm.PhaseRunning
			})
			gEventually(t, "the controller runs again", func() bool { return gState(t, m, ctrl.path) == supervisor.StateRunning })
			release()
			err := seamResult(t, "RestartChild", restarted)
			require.ErrorIs(t, err, cm.ErrShardNotHeld, "the restart says the lease was lost meanwhile")

			gEventually(t, "the group running", func() bool { return gState(t, m, "g") == supervisor.StateRunning })
			assert.Equal(t, 2, ctrl.runCount(), "the controller started once after the re-election")
			if slow == "store" {
				assert.Less(t, log.index("started g/store 3"), log.index("start g/ctrl 2"), "stores first: %v", log.snapshot())
			}
			noFailures(t, rec)
			seamShutdown(t, m)
			seamBooks(t, m, first, ctrl)
		})
	}
}

// A group's RestartChild whose first child fails to start again: the
// failure goes to the group's decider, and the request goes on with the
// rest (before, they stayed stopped with nothing to start them: found by
// TestStateSpace -statespace.trees). With RestForOne the decider's plan
// names the rest too: each child starts once either way (the plan skips
// one the request started meanwhile), and the answer names the failure.
func TestGroupRestartGoesOnPastAFailedStart(t *testing.T) {
	for _, strategy := range []supervisor.Strategy{cm.OneForOne, cm.RestForOne} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			log := &seamLog{}
			m := seamManager(t, nil, 0)
			first, second := newSeamChild(log, "g", "first"), newSeamChild(log, "g", "second")
			m.Add(cm.NewGroup("g", cm.SupervisionSpec{Strategy: strategy}, seamWebhook{first}, seamController{second}))
			gStart(t, m)
			first.setRun(2, func(context.Context) error { return errors.New("the second start fails") })

			err := seamResult(t, "RestartChild", seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "g") }))
			require.ErrorContains(t, err, "the second start fails", "the answer names the failure")
			gEventually(t, "both running again", func() bool {
				return gState(t, m, first.path) == supervisor.StateRunning && gState(t, m, second.path) == supervisor.StateRunning
			})
			assert.Equal(t, 3, first.runCount(), "the failed child restarted once by its group's decider")
			assert.Equal(t, 2, second.runCount(), "the child after it started once")
			seamShutdown(t, m)
			seamBooks(t, m, first, second)
		})
	}
}

// A group's RestartChild waiting on its webhook's start while a sibling
// of the group fails under an AllForOne level: the level's plan restarts
// the group whole, the request's start is cut short, and each child starts
// again once (a guard of the seam: it passes on 770b1b3 too).
func TestGroupRestartMeetsAnAllForOneRestartAbove(t *testing.T) {
	log := &seamLog{}
	m := seamManager(t, nil, 0)
	x := newSeamChild(log, "o", "x")
	hook, ctrl := newSeamChild(log, "o/g", "hook"), newSeamChild(log, "o/g", "ctrl")
	m.Add(cm.NewGroup("o", cm.SupervisionSpec{Strategy: cm.AllForOne},
		seamController{x}, cm.NewGroup("g", cm.SupervisionSpec{}, seamWebhook{hook}, seamController{ctrl})))
	gStart(t, m)
	entered, release := hook.blockRun(t, 2)

	restarted := seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "o/g") })
	seamReached(t, "the group's restart waits on its webhook", entered)
	x.fail()
	gEventually(t, "everything running again", func() bool {
		return x.runCount() == 2 && gState(t, m, x.path) == supervisor.StateRunning &&
			gState(t, m, hook.path) == supervisor.StateRunning && gState(t, m, ctrl.path) == supervisor.StateRunning
	})
	release()
	_ = seamResult(t, "RestartChild", restarted) // answered: nil, or that the plan interrupted it
	seamShutdown(t, m)
	assert.Equal(t, 2, ctrl.runCount(), "the controller started again once, by the plan: %v", log.snapshot())
	seamBooks(t, m, x, hook, ctrl)
}

// A RestartChild of one controller whose Shutdown hangs while the lease
// is stolen: the request owns the controller until its turn, as a group's
// does, so the stand-down takes it out; the request answers that the lease
// was lost meanwhile, and the controller runs again once, started by the
// re-election's round, with Restarts = runs - 1.
func TestRestartChildMeetsReelection(t *testing.T) {
	t.Parallel()
	srv, log := leasetest.NewServer(), &seamLog{}
	m := seamManager(t, srv, 0)
	rec := record(m)
	c := newSeamChild(log, "", "c")
	m.Add(seamController{c})
	gStart(t, m)
	release := c.holdShutdown(t, 1)

	restarted := seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "c") })
	gEventually(t, "the controller stopping", func() bool { return gState(t, m, c.path) == supervisor.StateStopping })
	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", elLeaseDuration))
	gEventually(t, "the lease lost", func() bool { return rec.count(cm.LeaderLost, "") == 1 })
	release()
	err := seamResult(t, "RestartChild", restarted)
	require.ErrorIs(t, err, cm.ErrShardNotHeld, "the restart says the lease was lost meanwhile")

	gEventually(t, "elected again and the controller running", func() bool {
		return rec.count(cm.LeaderElected, "") == 2 && gState(t, m, c.path) == supervisor.StateRunning
	})
	assert.Equal(t, 2, c.runCount(), "the controller started once after the re-election")
	noFailures(t, rec)
	seamShutdown(t, m)
	seamBooks(t, m, c)
}

// A group's RestartChild waiting on its store's Recover while the group's
// shard is stolen and won back; and the same for a restart plan after
// the store failed. The controller the restart has still to start stays
// its own (busy, Stopped) when the shard is acquired again, and starts
// only once the store has recovered: stores first wins over "a shard
// acquired while Running starts its controllers at once".
func TestGroupRestartMeetsShardWonBack(t *testing.T) {
	for _, by := range []string{"RestartChild", "a failure"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			srv, log := leasetest.NewServer(), &seamLog{}
			m := seamManager(t, srv, 2)
			rec := record(m)
			var mu sync.Mutex
			built := map[int][2]*seamChild{}
			m.AddShardedGroup("t", cm.SupervisionSpec{Strategy: cm.AllForOne}, func(sh cm.Shard) []cm.Runnable {
				g := fmt.Sprintf("t-%d", sh.Index)
				store, ctrl := newSeamChild(log, g, "store"), newSeamChild(log, g, "ctrl")
				mu.Lock()
				built[sh.Index] = [2]*seamChild{store, ctrl}
				mu.Unlock()
				return []cm.Runnable{seamController{ctrl}, seamStore{store}}
			})
			gStart(t, m)
			gEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
			store, ctrl := built[1][0], built[1][1]
			gEventually(t, "t-1 running", func() bool { return gState(t, m, "t-1") == supervisor.StateRunning })
			entered, release := store.blockRun(t, 2)

			var restarted <-chan error
			if by == "RestartChild" {
				restarted = seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "t-1") })
			} else {
				store.fail()
			}
			seamReached(t, "the store recovers again", entered)
			require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
			gEventually(t, "shard 1 lost", func() bool { return seamShardEvents(rec, cm.ShardLost, 1) == 1 })
			gEventually(t, "shard 1 won back", func() bool { return seamShardEvents(rec, cm.ShardAcquired, 1) == 2 })
			// The acquisition has been handled (its event is published
			// after it): the controller waits for its store.
			assert.Equal(t, supervisor.StateStopped, gState(t, m, ctrl.path), "the controller waits for its group's store")
			assert.Equal(t, 1, ctrl.runCount())
			release()
			if restarted != nil {
				require.NoError(t, seamResult(t, "RestartChild", restarted), "the shard is held again when the controller's turn comes")
			}
			gEventually(t, "the controller runs again", func() bool { return gState(t, m, ctrl.path) == supervisor.StateRunning })
			assert.Equal(t, 2, ctrl.runCount())
			assert.Less(t, log.index("started t-1/store 2"), log.index("start t-1/ctrl 2"), "stores first: %v", log.snapshot())
			for _, e := range rec.snapshot() {
				if e.Type == cm.ChildFailed && e.Child != store.path {
					t.Errorf("ChildFailed %s: %v", e.Child, e.Err)
				}
			}
			seamShutdown(t, m)
			seamBooks(t, m, store, ctrl, built[0][0], built[0][1])
		})
	}
}

// A re-election's new Run is a restart: after a stolen lease (or shard)
// is won back, Status.Restarts is the number of start calls minus one and
// a ChildRestarted was published for each new Run.
func TestReelectionCountsTheNewRun(t *testing.T) {
	for _, shards := range []int32{0, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			t.Parallel()
			srv, log := leasetest.NewServer(), &seamLog{}
			m := seamManager(t, srv, shards)
			rec := record(m)
			store, ctrl := newSeamChild(log, "", "store"), newSeamChild(log, "", "ctrl")
			m.AddStore(seamStore{store})
			m.Add(seamController{ctrl})
			gStart(t, m)
			lease, lost, won := elLeaseName, cm.LeaderLost, cm.LeaderElected
			children := []*seamChild{store, ctrl}
			if shards > 1 {
				// Another shard held keeps the stores running: only the
				// controller starts again.
				i := cm.ShardOf("ctrl", int(shards))
				gEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
				lease, lost, won = fmt.Sprintf("%s-%d", elLeaseName, i), cm.ShardLost, cm.ShardAcquired
				children = []*seamChild{ctrl}
			}
			require.NoError(t, srv.Steal(elNamespace, lease, "thief", elLeaseDuration))
			gEventually(t, "lost", func() bool { return rec.count(lost, "") >= 1 })
			gEventually(t, "won back", func() bool {
				return rec.count(won, "") >= 2 && mustStatus(t, m).Phase == cm.PhaseRunning
			})
			for _, c := range children {
				gEventually(t, c.path+" runs again", func() bool { return c.runCount() == 2 && gState(t, m, c.path) == supervisor.StateRunning })
				gEventually(t, c.path+"'s ChildRestarted", func() bool { return rec.count(cm.ChildRestarted, c.path) >= 1 })
				assert.Equal(t, 1, rec.count(cm.ChildRestarted, c.path))
				cs, _ := mustStatus(t, m).Child(c.path)
				assert.Equal(t, 1, cs.Restarts, "%s: Restarts = runs - 1", c.path)
			}
			noFailures(t, rec)
			seamShutdown(t, m)
			seamBooks(t, m, store, ctrl)
		})
	}
}

// AddChild under a group of AddShardedGroup, of a controller or of a
// group, pins the controllers to the group's shard, whatever the shard of
// their own name or path: they run on the replica holding the group's
// shard.
func TestAddChildUnderAShardedGroupTakesItsShard(t *testing.T) {
	t.Parallel()
	srv, log := leasetest.NewServer(), &seamLog{}
	m := seamManager(t, srv, 2)
	m.AddShardedGroup("t", cm.SupervisionSpec{}, func(sh cm.Shard) []cm.Runnable {
		return []cm.Runnable{seamController{newSeamChild(log, fmt.Sprintf("t-%d", sh.Index), "ctrl")}}
	})
	gStart(t, m)
	gEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	// Shard 1 goes to another replica for good: only shard 0 is held here.
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", time.Hour))
	gEventually(t, "shard 1 lost", func() bool { return !holdsShard(t, m, 1) })

	// Names whose own shard (a child added under a group was once pinned
	// by it) and whose path's (how every controller is pinned now, outside
	// a group of AddShardedGroup) is 1. (FNV-1a's low bit is the parity of
	// the key's bytes: for the deep child only its path can be 1.)
	plainName := pickName(t, "plain-%d", func(n string) bool { return cm.ShardOf(n, 2) == 1 && cm.ShardOf("t-0/"+n, 2) == 1 })
	deepName := pickName(t, "deep-%d", func(n string) bool { return cm.ShardOf("t-0/inner/"+n, 2) == 1 })
	plain := newSeamChild(log, "t-0", plainName)
	deep := newSeamChild(log, "t-0/inner", deepName)

	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	_, err := m.Request(ctx, supervisor.AddChild{Parent: "t-0", Runnable: seamController{plain}})
	require.NoError(t, err)
	_, err = m.Request(ctx, supervisor.AddChild{Parent: "t-0", Runnable: cm.NewGroup("inner", cm.SupervisionSpec{}, seamController{deep})})
	require.NoError(t, err)
	for _, c := range []*seamChild{plain, deep} {
		assert.Equal(t, supervisor.StateRunning, gState(t, m, c.path), "%s runs under its group's shard", c.path)
		assert.Equal(t, 1, c.runCount(), c.path)
	}
	st := mustStatus(t, m)
	require.Len(t, st.Shards, 2)
	assert.Contains(t, st.Shards[0].Children, plain.path)
	assert.Contains(t, st.Shards[0].Children, deep.path)
	assert.NotContains(t, st.Shards[1].Children, plain.path)
	assert.NotContains(t, st.Shards[1].Children, deep.path)
	seamShutdown(t, m)
}

// pickName is the first of format's names (format % 0, 1, ...) that ok
// accepts; the test fails when none of the first 200 is.
func pickName(t *testing.T, format string, ok func(string) bool) string {
	t.Helper()
	for i := range 200 {
		if name := fmt.Sprintf(format, i); ok(name) {
			return name
		}
	}
	t.Fatalf("no name %q found", format)
	return ""
}

// reportingController hands each incarnation's start context to the test
// and returns, started (its context then ends, its failure reporter stays).
type reportingController struct{ ctxs chan context.Context }

func (reportingController) Name() string { return "reporter" }
func (c reportingController) Run(ctx context.Context) error {
	c.ctxs <- ctx
	return nil
}
func (reportingController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "reporter", Healthy: true}
}
func (reportingController) Shutdown(context.Context) {}

// ReportFailure, called with the context a controller's Run received,
// fails that incarnation: the supervisor restarts it, and the event names
// the error. A context that did not come from a manager reports nothing.
func TestReportFailureRestartsTheChild(t *testing.T) {
	m := seamManager(t, nil, 0)
	rec := record(m)
	ctxs := make(chan context.Context, 2)
	m.Add(reportingController{ctxs})
	gStart(t, m)
	first := recvWithin(t, ctxs, "no Run")

	require.False(t, cm.ReportFailure(context.Background(), errors.New("nobody's")), "a context not from a manager")
	require.True(t, cm.ReportFailure(first, errors.New("lost my watch")))
	recvWithin(t, ctxs, "no second Run") // the next incarnation's Run
	rec.gWait(t, 1, cm.ChildRestarted, "reporter")
	var failed []error
	for _, e := range rec.snapshot() {
		if e.Type == cm.ChildFailed {
			failed = append(failed, e.Err)
		}
	}
	require.Len(t, failed, 1)
	require.ErrorContains(t, failed[0], "lost my watch")
	seamShutdown(t, m)
}
