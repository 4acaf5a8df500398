package supervise

import (
	"fmt"
	"slices"
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
				move := func() { s.become(stateFor(s, to), "test") }
				switch {
				case from == to:
					require.NotPanics(t, move)
					assert.Empty(t, s.out.events, "staying in a phase is no move")
				case isLegal[[2]supervisor.Phase{from, to}]:
					require.NotPanics(t, move)
					assert.Equal(t, to, s.state.phase())
					assert.Equal(t, to, s.obs.Phase())
					require.Len(t, s.out.events, 1)
					assert.Equal(t, supervisor.Event{Type: supervisor.PhaseChanged, Time: s.clock.now(), Phase: to}, s.out.events[0])
				default:
					require.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal phase move %s → %s (test)", from, to), move)
					assert.Equal(t, from, s.state.phase(), "an illegal move leaves the phase")
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
	s := &root{cfg: cfg, obs: cfg.Observed, clock: msgClock{clock: cfg.Clock}, out: outbox{bus: cfg.Bus, obs: cfg.Observed}}
	s.state = stateFor(s, p)
	s.obs.setPhase(p)
	return s
}

// stateFor is a state of phase p holding what p must own: a start round
// at the phase's first stage, the shutdown at its first.
func stateFor(s *root, p supervisor.Phase) phaseState {
	switch p {
	case supervisor.PhaseIdle:
		return idlePhase{}
	case supervisor.PhaseElecting:
		return electPhase{start: &startAttempt{s: s, stage: startElecting}}
	case supervisor.PhaseRunning:
		return runPhase{}
	}
	if slices.Contains(startPhases, p) {
		return startPhase{at: p, start: &startAttempt{s: s, stage: phaseAllows[p].startStages[0]}}
	}
	return endPhase{at: p, shut: &shutdownAttempt{s: s, stage: phaseAllows[p].shutdownStages[0]}}
}

// TestPhaseStates checks that become refuses a state that does not hold
// what its phase must own, naming what is missing, and leaves the state
// as it was; and that staying in a phase replaces its operations without
// a move.
func TestPhaseStates(t *testing.T) {
	round := &startAttempt{stage: startElecting}
	fence := &fencing{shard: -1}
	refused := []struct {
		from supervisor.Phase
		to   phaseState
		want string
	}{
		{supervisor.PhaseIdle, startPhase{at: supervisor.PhaseInitializing}, "phase Initializing without a start round"},
		{supervisor.PhaseInitializing, startPhase{at: supervisor.PhaseRecovering}, "phase Recovering without a start round"},
		{supervisor.PhaseRecovering, startPhase{at: supervisor.PhaseStarting}, "phase Starting without a start round"},
		{supervisor.PhaseRecovering, startPhase{at: supervisor.PhaseElecting, start: round}, "phase Electing is not a start round's"},
		{supervisor.PhaseInitializing, electPhase{}, "phase Electing without a start round or a stand-down"},
		{supervisor.PhaseRunning, electPhase{}, "phase Electing without a start round or a stand-down"},
		{supervisor.PhaseRunning, endPhase{at: supervisor.PhaseShuttingDown}, "phase ShuttingDown without the shutdown"},
		{supervisor.PhaseShuttingDown, endPhase{at: supervisor.PhaseStopped, fence: fence}, "phase Stopped without the shutdown"},
		{supervisor.PhaseShuttingDown, endPhase{at: supervisor.PhaseFailed}, "phase Failed without the shutdown"},
		{supervisor.PhaseRunning, endPhase{at: supervisor.PhaseRunning, shut: &shutdownAttempt{}}, "phase Running is not a shutdown's"},
	}
	for _, c := range refused {
		t.Run(fmt.Sprintf("%s→%T", c.from, c.to), func(t *testing.T) {
			s := phaseRoot(c.from)
			before := s.state
			require.PanicsWithValue(t, fmt.Sprintf("supervisor: %s (test)", c.want), func() { s.become(c.to, "test") })
			assert.Equal(t, before, s.state, "a refused state leaves the state")
			assert.Empty(t, s.out.events)
		})
	}

	// A stand-down ends: Electing keeps the round it made and drops the
	// stand-down, without a move.
	s := phaseRoot(supervisor.PhaseRunning)
	s.become(electPhase{fence: fence}, "standing down")
	require.Len(t, s.out.events, 1)
	assert.Same(t, fence, s.state.standingDown())
	assert.Nil(t, s.state.round())
	s.become(electPhase{start: round}, "stood down")
	require.Len(t, s.out.events, 1, "staying in Electing is no move")
	assert.Nil(t, s.state.standingDown())
	assert.Same(t, round, s.state.round())
	// The shutdown carries the stand-down it overtook to the end.
	shut := &shutdownAttempt{s: s}
	s.become(electPhase{start: round, fence: fence}, "standing down again")
	s.become(endPhase{at: supervisor.PhaseShuttingDown, shut: shut, fence: s.state.standingDown()}, "shutdown")
	assert.Nil(t, s.state.round(), "a shutdown owns no start round")
	assert.Same(t, fence, s.state.standingDown())
	assert.Same(t, shut, s.state.shutdown())
	assert.True(t, s.ending())
	// What Idle and Running own: nothing.
	for _, st := range []phaseState{idlePhase{}, runPhase{}} {
		assert.Nil(t, st.round())
		assert.Nil(t, st.standingDown())
		assert.Nil(t, st.shutdown())
	}
}

// TestPhaseOps checks what a phase allows beside the operations its state
// owns (phaseAllows), rule by rule, and against every combination the
// package's and the root package's tests, the state-space test and its
// sharded groups were seen to reach (recorded once by logging the
// combination after every message, when the operations were still
// pointers beside the phase; the operations the phase now owns by type
// are given by stateFor or by the case).
func TestPhaseOps(t *testing.T) {
	type beside struct{ plans, requests bool }
	seen := []struct {
		phase    supervisor.Phase
		beside   beside
		start    startStage
		shutdown shutdownStage
	}{
		{supervisor.PhaseIdle, beside{}, 0, 0},
		{supervisor.PhaseInitializing, beside{}, startPreflight, 0},
		{supervisor.PhaseInitializing, beside{}, startWebhooks, 0},
		{supervisor.PhaseInitializing, beside{plans: true}, startWebhooks, 0},
		{supervisor.PhaseElecting, beside{}, startElecting, 0},
		{supervisor.PhaseElecting, beside{requests: true}, startElecting, 0},
		{supervisor.PhaseElecting, beside{plans: true}, startElecting, 0},
		{supervisor.PhaseRecovering, beside{}, startStores, 0},
		{supervisor.PhaseRecovering, beside{plans: true}, startStores, 0},
		{supervisor.PhaseStarting, beside{}, startControllers, 0},
		{supervisor.PhaseStarting, beside{requests: true}, startControllers, 0},
		{supervisor.PhaseStarting, beside{plans: true}, startControllers, 0},
		{supervisor.PhaseRunning, beside{}, 0, 0},
		{supervisor.PhaseRunning, beside{requests: true}, 0, 0},
		{supervisor.PhaseRunning, beside{plans: true}, 0, 0},
		{supervisor.PhaseRunning, beside{plans: true, requests: true}, 0, 0},
		{supervisor.PhaseShuttingDown, beside{}, 0, shutdownStopping},
		{supervisor.PhaseShuttingDown, beside{}, 0, shutdownReleasing},
		{supervisor.PhaseShuttingDown, beside{requests: true}, 0, shutdownStopping},
		{supervisor.PhaseStopped, beside{}, 0, shutdownDone},
		{supervisor.PhaseFailed, beside{}, 0, shutdownDone},
		{supervisor.PhaseFailed, beside{requests: true}, 0, shutdownDone},
	}
	with := func(p supervisor.Phase, b beside, start startStage, shutdown shutdownStage) *root {
		s := phaseRoot(p)
		if a := s.state.round(); a != nil {
			a.stage = start
		}
		if a := s.state.shutdown(); a != nil {
			a.stage = shutdown
		}
		if b.plans {
			s.plans = map[*restartPlan]struct{}{{}: {}}
		}
		if b.requests {
			s.requests = requestSet{{}: {}}
		}
		return s
	}
	for _, c := range seen {
		t.Run(fmt.Sprintf("seen/%s/%+v", c.phase, c.beside), func(t *testing.T) {
			require.NotPanics(t, with(c.phase, c.beside, c.start, c.shutdown).checkOps)
		})
	}
	// Electing with only a stand-down (and plans or requests beside it),
	// and a shutdown that overtook one: seen too.
	for _, b := range []beside{{}, {plans: true}, {requests: true}} {
		s := with(supervisor.PhaseElecting, b, 0, 0)
		s.state = electPhase{fence: &fencing{shard: -1}}
		require.NotPanics(t, s.checkOps)
	}
	for _, st := range []shutdownStage{shutdownStopping, shutdownReleasing} {
		s := with(supervisor.PhaseShuttingDown, beside{}, 0, st)
		s.state = endPhase{at: supervisor.PhaseShuttingDown, shut: s.state.shutdown(), fence: &fencing{shard: -1}}
		require.NotPanics(t, s.checkOps)
	}

	// A start round's stage is its phase's.
	s := with(supervisor.PhaseRecovering, beside{}, startControllers, 0)
	require.PanicsWithValue(t, "supervisor: a start round at stage controllers in phase Recovering", s.checkOps)
	s = with(supervisor.PhaseElecting, beside{}, startStores, 0)
	require.PanicsWithValue(t, "supervisor: a start round at stage stores in phase Electing", s.checkOps)
	s = with(supervisor.PhaseInitializing, beside{}, startElecting, 0)
	require.PanicsWithValue(t, "supervisor: a start round at stage electing in phase Initializing", s.checkOps)
	// A start round takes no request before the lease could be held.
	s = with(supervisor.PhaseInitializing, beside{requests: true}, startWebhooks, 0)
	require.PanicsWithValue(t, "supervisor: a lifecycle request in flight in phase Initializing", s.checkOps)
	// From ShuttingDown on: the shutdown at its stage, no restart plan.
	for _, p := range []supervisor.Phase{supervisor.PhaseShuttingDown, supervisor.PhaseStopped, supervisor.PhaseFailed} {
		s := with(p, beside{plans: true}, 0, phaseAllows[p].shutdownStages[0])
		require.PanicsWithValue(t, fmt.Sprintf("supervisor: a restart plan in flight in phase %s", p), s.checkOps)
	}
	s = with(supervisor.PhaseStopped, beside{requests: true}, 0, shutdownDone)
	require.PanicsWithValue(t, "supervisor: a lifecycle request in flight in phase Stopped", s.checkOps)
	s = with(supervisor.PhaseStopped, beside{}, 0, shutdownStopping)
	require.PanicsWithValue(t, "supervisor: the shutdown at stage stopping in phase Stopped", s.checkOps)
	s = with(supervisor.PhaseShuttingDown, beside{}, 0, shutdownDone)
	require.PanicsWithValue(t, "supervisor: the shutdown at stage done in phase ShuttingDown", s.checkOps)
	// Idle has nothing in flight.
	s = with(supervisor.PhaseIdle, beside{plans: true}, 0, 0)
	require.PanicsWithValue(t, "supervisor: a restart plan in flight in phase Idle", s.checkOps)
	s = with(supervisor.PhaseIdle, beside{requests: true}, 0, 0)
	require.PanicsWithValue(t, "supervisor: a lifecycle request in flight in phase Idle", s.checkOps)
}
