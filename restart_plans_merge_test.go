package controllermanager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// Found by a hostile read of the supervisor (stop 55). Each test fails at
// the commit before its fix.

// A group restarted whole by an AllForOne plan is counted a restart when
// the plan is made (restartWhole); a second failure of a sibling while
// the first plan is still in flight (the group not started again yet)
// made a new plan that merged the first, and counted the group again:
// Restarts 2 and two ChildRestarted for one new run of the group.
func TestAGroupRestartIsCountedOncePerRunWhenPlansMerge(t *testing.T) {
	log := &seamLog{}
	m := seamManager(t, nil, 0)
	rec := record(m)
	x := newSeamChild(log, "o", "x")
	ctrl := newSeamChild(log, "o/g", "ctrl")
	m.Add(cm.NewGroup("o", cm.SupervisionSpec{Strategy: cm.AllForOne},
		seamController{x}, cm.NewGroup("g", cm.SupervisionSpec{}, seamController{ctrl})))
	gStart(t, m)
	// x's second start fails: the plan P1 (x, g) is still to start g when
	// x's failure makes P2 (x, g), which takes P1's rest in.
	x.setRun(2, func(context.Context) error { return errors.New("x's second start fails") })
	x.fail()
	gEventually(t, "everything running again", func() bool {
		return x.runCount() == 3 && gState(t, m, x.path) == supervisor.StateRunning &&
			gState(t, m, ctrl.path) == supervisor.StateRunning
	})
	seamShutdown(t, m)
	assert.Equal(t, 2, ctrl.runCount(), "o/g/ctrl ran twice: %v", log.snapshot())
	st := mustStatus(t, m)
	g, _ := st.Child("o/g")
	assert.Equal(t, ctrl.runCount()-1, g.Restarts, "o/g Restarts = runs of the group - 1: %v", log.snapshot())
	assert.Equal(t, ctrl.runCount()-1, rec.gCount(cm.ChildRestarted, "o/g"), "ChildRestarted of o/g")
	seamBooks(t, m, x, ctrl)
}

// A shutdown that begins while a lost lease is being fenced (a stand-down,
// Reelect). Once the fenced children had stopped, the stand-down told the
// elector Fenced though the manager was shutting down (fence.go, stopped):
// the elector campaigned again, and a replica shutting down won the lease
// back (LeaderElected, Leader true) while a webhook's Shutdown still ran,
// keeping the other replicas out.
//
// The lease is 8s here, so that its fence timeout (several seconds) cannot
// pass, on a loaded machine, between the fencing seen and the shutdown
// taken: with elSpec's 720ms it did once, in a loaded run of the whole
// package, and the manager ended Failed before the shutdown came.
func TestAShutdownDuringAStandDownDoesNotCampaignAgain(t *testing.T) {
	srv, log := leasetest.NewServer(), &seamLog{}
	spec := elSpec(cm.LeaseLostReelect)
	spec.LeaseDuration, spec.RenewDeadline = metav1.Duration{Duration: 8 * time.Second}, metav1.Duration{Duration: 2 * time.Second}
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")), cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()},
		"", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	rec := record(m)
	w, c := newSeamChild(log, "", "w"), newSeamChild(log, "", "c")
	m.Add(seamWebhook{w}, seamController{c})
	gStart(t, m)
	gEventually(t, "elected", func() bool { return rec.count(cm.LeaderElected, "") == 1 })
	releaseC := c.holdShutdown(t, 1)
	releaseW := w.holdShutdown(t, 1)

	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", 300*time.Millisecond))
	gEventually(t, "the lease lost", func() bool { return rec.count(cm.LeaderLost, "") == 1 })
	gEventually(t, "c fencing", func() bool { return gState(t, m, c.path) == supervisor.StateStopping })
	shut := seamCall(func(ctx context.Context) error { m.ShutdownAndWait(ctx); return nil })
	gEventually(t, "shutting down", func() bool { return mustStatus(t, m).Phase == cm.PhaseShuttingDown })
	releaseC() // the fence completes; w's Shutdown still runs
	gEventually(t, "c stopped", func() bool { return gState(t, m, c.path) == supervisor.StateStopped })
	// Give the thief's lease time to expire: a replica that campaigns
	// again wins it within a few retry periods.
	deadline := time.Now().Add(elLeaseDuration)
	for time.Now().Before(deadline) && rec.count(cm.LeaderElected, "") == 1 {
		<-time.After(20 * time.Millisecond) // a poll with a deadline, not a synchronisation
	}
	st := mustStatus(t, m)
	releaseW()
	_ = seamResult(t, "ShutdownAndWait", shut)
	assert.Equal(t, 1, rec.count(cm.LeaderElected, ""), "a replica shutting down won the lease back: %v", rec.phases())
	assert.False(t, st.Leader, "Leader while shutting down")
	assert.Equal(t, 1, c.runCount(), "c never ran again")
}

// A group's RestartChild waits on its controller c1's Run, c2 still
// queued, when a sibling of the group fails under an AllForOne level: the
// level's plan restarts the group whole (its store s too). c1's start cut
// short, the request went on at once and started c2, its own queued child,
// while the plan was still stopping or backing off: c2 ran while its
// group's store was stopped, before the plan recovered the store again.
// Now the plan starts c2, in its order.
func TestAGroupRestartLeavesAQueuedChildToAPlanAbove(t *testing.T) {
	log := &seamLog{}
	m := seamManager(t, nil, 0)
	rec := record(m)
	x := newSeamChild(log, "o", "x")
	s, c1, c2 := newSeamChild(log, "o/g", "s"), newSeamChild(log, "o/g", "c1"), newSeamChild(log, "o/g", "c2")
	m.Add(cm.NewGroup("o", cm.SupervisionSpec{Strategy: cm.AllForOne},
		seamController{x}, cm.NewGroup("g", cm.SupervisionSpec{}, seamStore{s}, seamController{c1}, seamController{c2})))
	gStart(t, m)
	entered, _ := c1.blockRun(t, 2)

	restarted := seamCall(func(ctx context.Context) error { return m.RestartChild(ctx, "o/g") })
	seamReached(t, "the group's restart waits on c1's Run", entered)
	x.fail()
	gEventually(t, "everything running again", func() bool {
		return x.runCount() == 2 && s.runCount() == 3 && gState(t, m, x.path) == supervisor.StateRunning &&
			gState(t, m, s.path) == supervisor.StateRunning && gState(t, m, c1.path) == supervisor.StateRunning &&
			gState(t, m, c2.path) == supervisor.StateRunning
	})
	t.Logf("RestartChild: %v", seamResult(t, "RestartChild", restarted))
	snap := log.snapshot()
	startC2, recovered := log.index("start o/g/c2 2"), log.index("started o/g/s 3")
	assert.True(t, startC2 > recovered, "o/g/c2 started (at %d) before o/g/s recovered again (at %d): %v", startC2, recovered, snap)
	seamEndsClean(t, m, rec, x, s, c1, c2)
}
