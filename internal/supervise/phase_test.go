package supervise

import (
	"fmt"
	"testing"

	"github.com/actorkube/controllermanager/supervisor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPhaseMoves drives every legal move of the phase through become, and
// checks that every other move is refused with a panic naming both phases
// (which Receive turns into an internal error).
func TestPhaseMoves(t *testing.T) {
	legal := []struct{ from, to supervisor.Phase }{
		{supervisor.PhaseIdle, supervisor.PhaseInitializing},
		{supervisor.PhaseIdle, supervisor.PhaseShuttingDown},
		{supervisor.PhaseInitializing, supervisor.PhaseElecting},
		{supervisor.PhaseInitializing, supervisor.PhaseRecovering},
		{supervisor.PhaseInitializing, supervisor.PhaseRunning},
		{supervisor.PhaseInitializing, supervisor.PhaseShuttingDown},
		{supervisor.PhaseElecting, supervisor.PhaseRecovering},
		{supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
		{supervisor.PhaseRecovering, supervisor.PhaseStarting},
		{supervisor.PhaseRecovering, supervisor.PhaseElecting},
		{supervisor.PhaseRecovering, supervisor.PhaseShuttingDown},
		{supervisor.PhaseStarting, supervisor.PhaseRunning},
		{supervisor.PhaseStarting, supervisor.PhaseElecting},
		{supervisor.PhaseStarting, supervisor.PhaseShuttingDown},
		{supervisor.PhaseRunning, supervisor.PhaseElecting},
		{supervisor.PhaseRunning, supervisor.PhaseShuttingDown},
		{supervisor.PhaseShuttingDown, supervisor.PhaseStopped},
		{supervisor.PhaseShuttingDown, supervisor.PhaseFailed},
	}
	isLegal := map[[2]supervisor.Phase]bool{}
	for _, m := range legal {
		isLegal[[2]supervisor.Phase{m.from, m.to}] = true
	}
	for _, from := range supervisor.Phases() {
		for _, to := range supervisor.Phases() {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				s := phaseRoot(from)
				move := func() { s.become(to, "test") }
				switch {
				case from == to:
					require.NotPanics(t, move)
					assert.Empty(t, s.out.events, "staying in a phase is no move")
				case isLegal[[2]supervisor.Phase{from, to}]:
					require.NotPanics(t, move)
					assert.Equal(t, to, s.phase)
					assert.Equal(t, to, s.obs.Phase())
					require.Len(t, s.out.events, 1)
					assert.Equal(t, supervisor.Event{Type: supervisor.PhaseChanged, Time: s.clock.now(), Phase: to}, s.out.events[0])
				default:
					require.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal phase move %s → %s (test)", from, to), move)
					assert.Equal(t, from, s.phase, "an illegal move leaves the phase")
					assert.Equal(t, from, s.obs.Phase())
					assert.Empty(t, s.out.events)
				}
			})
		}
	}
}

func phaseRoot(p supervisor.Phase) *root {
	cfg := Config{}
	cfg.fill()
	s := &root{cfg: cfg, obs: cfg.Observed, phase: p, clock: msgClock{clock: cfg.Clock}, out: outbox{bus: cfg.Bus, obs: cfg.Observed}}
	s.obs.setPhase(p)
	return s
}

// opsRoot is a root in phase p with the operations of o in flight, the
// start round and the shutdown at the stages given.
func opsRoot(p supervisor.Phase, o op, start startStage, shutdown shutdownStage) *root {
	s := phaseRoot(p)
	if o&opStart != 0 {
		s.start = &startAttempt{s: s, stage: start}
	}
	if o&opStandDown != 0 {
		s.fencing = &fencing{s: s, shard: -1}
	}
	if o&opShutdown != 0 {
		s.shutdown = &shutdownAttempt{s: s, stage: shutdown}
	}
	if o&opPlans != 0 {
		s.plans = map[*restartPlan]struct{}{{}: {}}
	}
	if o&opRequests != 0 {
		s.requests = requestSet{{}: {}}
	}
	return s
}

// TestPhaseOps checks the table of what each phase allows in flight
// (phaseOps) against what it means, rule by rule, and against every
// combination the package's and the root package's tests, the state-space
// test and its sharded groups were seen to reach (recorded once, before
// the table was written, by logging the combination after every message).
func TestPhaseOps(t *testing.T) {
	const none = op(0)
	seen := []struct {
		phase    supervisor.Phase
		ops      op
		start    startStage
		shutdown shutdownStage
	}{
		{supervisor.PhaseIdle, none, 0, 0},
		{supervisor.PhaseInitializing, opStart, startPreflight, 0},
		{supervisor.PhaseInitializing, opStart, startWebhooks, 0},
		{supervisor.PhaseInitializing, opStart | opPlans, startWebhooks, 0},
		{supervisor.PhaseElecting, opStandDown, 0, 0},
		{supervisor.PhaseElecting, opStart, startElecting, 0},
		{supervisor.PhaseElecting, opStart | opStandDown, startElecting, 0},
		{supervisor.PhaseElecting, opStandDown | opRequests, 0, 0},
		{supervisor.PhaseElecting, opStart | opRequests, startElecting, 0},
		{supervisor.PhaseElecting, opStandDown | opPlans, 0, 0},
		{supervisor.PhaseElecting, opStart | opPlans, startElecting, 0},
		{supervisor.PhaseRecovering, opStart, startStores, 0},
		{supervisor.PhaseRecovering, opStart | opPlans, startStores, 0},
		{supervisor.PhaseStarting, opStart, startControllers, 0},
		{supervisor.PhaseStarting, opStart | opRequests, startControllers, 0},
		{supervisor.PhaseStarting, opStart | opPlans, startControllers, 0},
		{supervisor.PhaseRunning, none, 0, 0},
		{supervisor.PhaseRunning, opRequests, 0, 0},
		{supervisor.PhaseRunning, opPlans, 0, 0},
		{supervisor.PhaseRunning, opPlans | opRequests, 0, 0},
		{supervisor.PhaseShuttingDown, opShutdown, 0, shutdownStopping},
		{supervisor.PhaseShuttingDown, opShutdown, 0, shutdownReleasing},
		{supervisor.PhaseShuttingDown, opShutdown | opStandDown, 0, shutdownStopping},
		{supervisor.PhaseShuttingDown, opShutdown | opStandDown, 0, shutdownReleasing},
		{supervisor.PhaseShuttingDown, opShutdown | opRequests, 0, shutdownStopping},
		{supervisor.PhaseStopped, opShutdown, 0, shutdownDone},
		{supervisor.PhaseFailed, opShutdown, 0, shutdownDone},
		{supervisor.PhaseFailed, opShutdown | opStandDown, 0, shutdownDone},
	}
	for _, c := range seen {
		t.Run(fmt.Sprintf("seen/%s/%s", c.phase, c.ops), func(t *testing.T) {
			require.NotPanics(t, opsRoot(c.phase, c.ops, c.start, c.shutdown).checkOps)
		})
	}

	// Nothing but restart plans and requests runs beside Running.
	for _, o := range []op{opStart, opStandDown, opShutdown} {
		s := opsRoot(supervisor.PhaseRunning, o|opPlans, startControllers, shutdownStopping)
		require.PanicsWithValue(t, fmt.Sprintf("supervisor: %s in flight in phase Running", o), s.checkOps)
	}
	// Electing with nothing to start the replica once elected.
	for _, o := range []op{none, opPlans, opRequests} {
		s := opsRoot(supervisor.PhaseElecting, o, 0, 0)
		require.PanicsWithValue(t, "supervisor: phase Electing without a start round or a stand-down", s.checkOps)
	}
	// A start round's stage is its phase's.
	s := opsRoot(supervisor.PhaseRecovering, opStart, startControllers, 0)
	require.PanicsWithValue(t, "supervisor: a start round at stage controllers in phase Recovering", s.checkOps)
	s = opsRoot(supervisor.PhaseElecting, opStart, startStores, 0)
	require.PanicsWithValue(t, "supervisor: a start round at stage stores in phase Electing", s.checkOps)
	for _, p := range []supervisor.Phase{supervisor.PhaseInitializing, supervisor.PhaseRecovering, supervisor.PhaseStarting} {
		s := opsRoot(p, opPlans, 0, 0)
		require.PanicsWithValue(t, fmt.Sprintf("supervisor: phase %s without a start round", p), s.checkOps)
	}
	// From ShuttingDown on: the shutdown, at its stage, and no restart
	// plan or start round.
	for _, p := range []supervisor.Phase{supervisor.PhaseShuttingDown, supervisor.PhaseStopped, supervisor.PhaseFailed} {
		s := opsRoot(p, none, 0, 0)
		require.PanicsWithValue(t, fmt.Sprintf("supervisor: phase %s without the shutdown", p), s.checkOps)
		for _, o := range []op{opPlans, opStart} {
			s := opsRoot(p, opShutdown|o, startControllers, shutdownDone)
			if p == supervisor.PhaseShuttingDown {
				s.shutdown.stage = shutdownStopping
			}
			require.PanicsWithValue(t, fmt.Sprintf("supervisor: %s in flight in phase %s", o, p), s.checkOps)
		}
	}
	s = opsRoot(supervisor.PhaseStopped, opShutdown, 0, shutdownStopping)
	require.PanicsWithValue(t, "supervisor: the shutdown at stage stopping in phase Stopped", s.checkOps)
	s = opsRoot(supervisor.PhaseShuttingDown, opShutdown, 0, shutdownDone)
	require.PanicsWithValue(t, "supervisor: the shutdown at stage done in phase ShuttingDown", s.checkOps)
	// Idle has nothing in flight.
	s = opsRoot(supervisor.PhaseIdle, opPlans, 0, 0)
	require.PanicsWithValue(t, "supervisor: a restart plan in flight in phase Idle", s.checkOps)
	assert.Equal(t, "a start round, the shutdown", (opStart | opShutdown).String())
}
