package supervisor

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPhaseMoves drives every legal move of the phase through become, and
// checks that every other move is refused with a panic naming both phases
// (which Receive turns into an internal error).
func TestPhaseMoves(t *testing.T) {
	legal := []struct{ from, to Phase }{
		{PhaseIdle, PhaseInitializing},
		{PhaseIdle, PhaseShuttingDown},
		{PhaseInitializing, PhaseElecting},
		{PhaseInitializing, PhaseRecovering},
		{PhaseInitializing, PhaseRunning},
		{PhaseInitializing, PhaseShuttingDown},
		{PhaseElecting, PhaseRecovering},
		{PhaseElecting, PhaseShuttingDown},
		{PhaseRecovering, PhaseStarting},
		{PhaseRecovering, PhaseElecting},
		{PhaseRecovering, PhaseShuttingDown},
		{PhaseStarting, PhaseRunning},
		{PhaseStarting, PhaseElecting},
		{PhaseStarting, PhaseShuttingDown},
		{PhaseRunning, PhaseElecting},
		{PhaseRunning, PhaseShuttingDown},
		{PhaseShuttingDown, PhaseStopped},
		{PhaseShuttingDown, PhaseFailed},
	}
	isLegal := map[[2]Phase]bool{}
	for _, m := range legal {
		isLegal[[2]Phase{m.from, m.to}] = true
	}
	for _, from := range Phases() {
		for _, to := range Phases() {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				s := phaseRoot(from)
				move := func() { s.become(to, "test") }
				switch {
				case from == to:
					require.NotPanics(t, move)
					assert.Empty(t, s.events, "staying in a phase is no move")
				case isLegal[[2]Phase{from, to}]:
					require.NotPanics(t, move)
					assert.Equal(t, to, s.phase)
					assert.Equal(t, to, s.obs.Phase())
					require.Len(t, s.events, 1)
					assert.Equal(t, Event{Type: PhaseChanged, Time: s.now(), Phase: to}, s.events[0])
				default:
					require.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal phase move %s → %s (test)", from, to), move)
					assert.Equal(t, from, s.phase, "an illegal move leaves the phase")
					assert.Equal(t, from, s.obs.Phase())
					assert.Empty(t, s.events)
				}
			})
		}
	}
}

func phaseRoot(p Phase) *root {
	cfg := Config{}
	cfg.fill()
	s := &root{cfg: cfg, obs: cfg.Observed, bus: cfg.Bus, phase: p}
	s.obs.setPhase(p)
	return s
}
