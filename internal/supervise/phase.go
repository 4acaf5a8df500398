package supervise

import (
	"fmt"
	"slices"

	"github.com/actorkube/controllermanager/supervisor"
)

// legalMoves is every move of the manager's phase, from → the phases it may
// go to. The start round goes down the first column in order (Initializing
// skips Electing without election, and goes straight to Running for a
// webhook or base manager); a lost lease, or the last shard handed over,
// takes a replica that has begun recovering back to Electing; every phase
// but the final ones may shut down.
var legalMoves = map[supervisor.Phase][]supervisor.Phase{
	supervisor.PhaseIdle:         {supervisor.PhaseInitializing, supervisor.PhaseShuttingDown},
	supervisor.PhaseInitializing: {supervisor.PhaseElecting, supervisor.PhaseRecovering, supervisor.PhaseRunning, supervisor.PhaseShuttingDown},
	supervisor.PhaseElecting:     {supervisor.PhaseRecovering, supervisor.PhaseShuttingDown},
	supervisor.PhaseRecovering:   {supervisor.PhaseStarting, supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseStarting:     {supervisor.PhaseRunning, supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseRunning:      {supervisor.PhaseElecting, supervisor.PhaseShuttingDown},
	supervisor.PhaseShuttingDown: {supervisor.PhaseStopped, supervisor.PhaseFailed},
	supervisor.PhaseStopped:      nil,
	supervisor.PhaseFailed:       nil,
}

// legalMove reports whether the phase may go from from to to.
func legalMove(from, to supervisor.Phase) bool {
	for _, p := range legalMoves[from] {
		if p == to {
			return true
		}
	}
	return false
}

// phaseState is the manager's phase together with the operations that
// phase owns. Each kind of phase is its own type and holds exactly the
// operations it allows: a start round from Initializing to Starting, a
// start round or a stand-down (or both) in Electing, the shutdown (and the
// stand-down it overtook, if any) from ShuttingDown on, nothing in Idle and
// Running. An operation the phase does not own cannot be written down, and
// a state is made only where become takes it, which checks the move
// (legalMoves) and what the state must hold (holds). The values are
// immutable: a phase's operations change only by becoming a new state.
type phaseState interface {
	phase() supervisor.Phase
	// round is the start round in flight, if the phase owns one.
	round() *startAttempt
	// standingDown is the replica-wide fencing in progress (a lost lease
	// or the last shard handed over), if the phase owns one.
	standingDown() *fencing
	// shutdown is the manager's shutdown, from ShuttingDown to the end.
	shutdown() *shutdownAttempt
}

type (
	// ownsNothing is what a phase owns unless its type says otherwise.
	ownsNothing struct{}
	// idlePhase: before StartManager.
	idlePhase struct{ ownsNothing }
	// startPhase: Initializing, Recovering or Starting, with the start
	// round that goes through them.
	startPhase struct {
		ownsNothing
		at    supervisor.Phase
		start *startAttempt
	}
	// electPhase: Electing, with a start round waiting for the lease, a
	// stand-down whose end makes one (after which the replica campaigns),
	// or both (a round abandoned by the stand-down hands its Start call on
	// to the next).
	electPhase struct {
		ownsNothing
		start *startAttempt
		fence *fencing
	}
	// runPhase: Running. Restart plans and requests run beside it; they
	// are not the phase's (checkOps).
	runPhase struct{ ownsNothing }
	// endPhase: ShuttingDown, Stopped or Failed, with the shutdown and the
	// stand-down it overtook, if any.
	endPhase struct {
		ownsNothing
		at    supervisor.Phase
		shut  *shutdownAttempt
		fence *fencing
	}
)

func (ownsNothing) round() *startAttempt       { return nil }
func (ownsNothing) standingDown() *fencing     { return nil }
func (ownsNothing) shutdown() *shutdownAttempt { return nil }

func (idlePhase) phase() supervisor.Phase     { return supervisor.PhaseIdle }
func (p startPhase) phase() supervisor.Phase  { return p.at }
func (p startPhase) round() *startAttempt     { return p.start }
func (electPhase) phase() supervisor.Phase    { return supervisor.PhaseElecting }
func (p electPhase) round() *startAttempt     { return p.start }
func (p electPhase) standingDown() *fencing   { return p.fence }
func (runPhase) phase() supervisor.Phase      { return supervisor.PhaseRunning }
func (p endPhase) phase() supervisor.Phase    { return p.at }
func (p endPhase) shutdown() *shutdownAttempt { return p.shut }
func (p endPhase) standingDown() *fencing     { return p.fence }

// holds says what st lacks of what its phase must own, or "" when it has
// all of it: a start round from Initializing to Starting, a start round or
// a stand-down in Electing (else nothing would start the replica once
// elected), the shutdown from ShuttingDown on; and that a start or end
// state is of a phase of its kind.
func holds(st phaseState) string {
	switch st := st.(type) {
	case startPhase:
		if !slices.Contains(startPhases, st.at) {
			return fmt.Sprintf("phase %s is not a start round's", st.at)
		}
		if st.start == nil {
			return fmt.Sprintf("phase %s without a start round", st.at)
		}
	case electPhase:
		if st.start == nil && st.fence == nil {
			return "phase Electing without a start round or a stand-down"
		}
	case endPhase:
		if !st.at.Ended() && st.at != supervisor.PhaseShuttingDown {
			return fmt.Sprintf("phase %s is not a shutdown's", st.at)
		}
		if st.shut == nil {
			return fmt.Sprintf("phase %s without the shutdown", st.at)
		}
	}
	return ""
}

// startPhases are the phases of startPhase.
var startPhases = []supervisor.Phase{supervisor.PhaseInitializing, supervisor.PhaseRecovering, supervisor.PhaseStarting}

// become is the one way the manager's phase and the operations it owns
// change. A move that legalMoves does not list, or a state that does not
// hold what its phase must own (holds), is a bug of this package and
// panics, naming both phases or what is missing, which Receive turns into
// an internal error (the manager fails, the stack logged). Staying in a
// phase replaces its operations without a move. why says what moved it,
// for the log.
func (s *root) become(to phaseState, why string) {
	from, p := s.state.phase(), to.phase()
	if from != p && !legalMove(from, p) {
		panic(fmt.Sprintf("supervisor: illegal phase move %s → %s (%s)", from, p, why))
	}
	if missing := holds(to); missing != "" {
		panic(fmt.Sprintf("supervisor: %s (%s)", missing, why))
	}
	s.state = to
	if from == p {
		return
	}
	s.obs.setPhase(p)
	s.cfg.Logger.Debug("phase changed", "from", from, "phase", p, "why", why)
	s.out.emit(supervisor.Event{Type: supervisor.PhaseChanged, Time: s.clock.now(), Phase: p})
}

// ending reports whether the manager is on its way out: a shutdown has
// begun, or the manager has stopped. Nothing new begins then (a start, a
// restart, a fencing's next step); what is in flight is answered
// ErrShutdown or left to the shutdown.
func (s *root) ending() bool { return s.state.shutdown() != nil }

// allows is what a phase allows beside the operations its state owns,
// once a message has been handled: restart plans, lifecycle requests,
// and the stages its start round or its shutdown may be at.
type allows struct {
	plans, requests bool
	startStages     []startStage
	shutdownStages  []shutdownStage
}

// phaseAllows is, per phase, what allows says. A start round's stage is
// its phase's (Electing waits for the lease in startElecting). A start
// round takes no lifecycle request before the lease could be held. From
// ShuttingDown on no restart plan runs (quiesce has cancelled them, and
// nothing is supervised while ending); a request waits for its children to
// stop, past the end if the manager failed with one stuck.
var phaseAllows = map[supervisor.Phase]allows{
	supervisor.PhaseIdle:         {},
	supervisor.PhaseInitializing: {plans: true, startStages: []startStage{startPreflight, startWebhooks}},
	supervisor.PhaseElecting:     {plans: true, requests: true, startStages: []startStage{startElecting}},
	supervisor.PhaseRecovering:   {plans: true, requests: true, startStages: []startStage{startStores}},
	supervisor.PhaseStarting:     {plans: true, requests: true, startStages: []startStage{startControllers, startRunnables}},
	supervisor.PhaseRunning:      {plans: true, requests: true},
	supervisor.PhaseShuttingDown: {requests: true, shutdownStages: []shutdownStage{shutdownStopping, shutdownReleasing}},
	supervisor.PhaseStopped:      {shutdownStages: []shutdownStage{shutdownDone}},
	supervisor.PhaseFailed:       {requests: true, shutdownStages: []shutdownStage{shutdownDone}},
}

// checkOps checks, once a message has been handled, what the phase's
// state cannot hold by its type (phaseAllows): the stages its start round
// and its shutdown are at (they move by their own transitions, a stage
// ahead of the phase for the length of one step), and the restart plans
// and requests beside it. A breach is a bug of this package, as an
// illegal move is: it panics, naming the phase, which Receive turns into
// an internal error.
func (s *root) checkOps() {
	p := s.state.phase()
	allowed := phaseAllows[p]
	if len(s.plans) > 0 && !allowed.plans {
		panic(fmt.Sprintf("supervisor: a restart plan in flight in phase %s", p))
	}
	if len(s.requests) > 0 && !allowed.requests {
		panic(fmt.Sprintf("supervisor: a lifecycle request in flight in phase %s", p))
	}
	if a := s.state.round(); a != nil && !slices.Contains(allowed.startStages, a.stage) {
		panic(fmt.Sprintf("supervisor: a start round at stage %s in phase %s", a.stage, p))
	}
	if a := s.state.shutdown(); a != nil && !slices.Contains(allowed.shutdownStages, a.stage) {
		panic(fmt.Sprintf("supervisor: the shutdown at stage %s in phase %s", a.stage, p))
	}
}
