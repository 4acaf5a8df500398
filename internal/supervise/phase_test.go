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
