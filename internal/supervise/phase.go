package supervise

import (
	"fmt"
	"slices"
	"strings"

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

// become is the one way the manager's phase moves: to the phase it is in
// already is nothing; a move that legalMoves does not list is a bug of this
// package and panics, naming both phases, which Receive turns into an
// internal error (the manager fails, the stack logged). why says what moved
// it, for the log.
func (s *root) become(to supervisor.Phase, why string) {
	from := s.phase
	if from == to {
		return
	}
	if !legalMove(from, to) {
		panic(fmt.Sprintf("supervisor: illegal phase move %s → %s (%s)", from, to, why))
	}
	s.phase = to
	s.obs.setPhase(to)
	s.cfg.Logger.Debug("phase changed", "from", from, "phase", to, "why", why)
	s.out.emit(supervisor.Event{Type: supervisor.PhaseChanged, Time: s.clock.now(), Phase: to})
}

// ending reports whether the manager is on its way out: a shutdown has
// begun, or the manager has stopped. Nothing new begins then (a start, a
// restart, a fencing's next step); what is in flight is answered
// ErrShutdown or left to the shutdown.
func (s *root) ending() bool { return s.shutdown != nil || s.phase.Ended() }

// op is an operation of the root's that spans messages. Which ones may be
// in flight is a matter of the phase: phaseOps.
type op uint8

const (
	opStart     op = 1 << iota // a start round (s.start)
	opStandDown                // a replica-wide fencing: the lease or the last shard lost or handed over (s.fencing)
	opShutdown                 // the shutdown (s.shutdown)
	opPlans                    // restart plans (s.plans)
	opRequests                 // lifecycle requests (s.requests)
)

var opNames = [...]string{"a start round", "a stand-down", "the shutdown", "a restart plan", "a lifecycle request"}

func (o op) String() string {
	var names []string
	for i, name := range opNames {
		if o&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// opsOf is what a phase allows once a message has been handled: the
// operations that may be in flight (may), one of which must be (must: none
// is 0), and the stages the start round or the shutdown may be at.
type opsOf struct {
	may, must      op
	startStages    []startStage
	shutdownStages []shutdownStage
}

// phaseOps is, per phase, which of the root's operations may be in flight
// once a message has been handled. A start round is the phase's own from
// Initializing to Starting, and its stage is the phase's (Electing waits
// for the lease in startElecting). Running has none but restart plans and
// lifecycle requests. A stand-down (the lease lost with Reelect, the last
// shard handed over) is in Electing, or in a shutdown that overtook it.
// Electing always has a start round waiting for the lease or a stand-down
// that makes one when its children have stopped: otherwise nothing would
// start the replica when it is elected. From ShuttingDown on, the shutdown
// is there to the end, and no restart plan (quiesce has cancelled them, and
// nothing is supervised while ending); a request waits for its children to
// stop, past the end if the manager failed with one stuck.
//
// A shard's own hand-over or fencing is the shard's (shardState), not in
// this table: it may be in flight in any phase the shard can be held in.
var phaseOps = map[supervisor.Phase]opsOf{
	supervisor.PhaseIdle:         {},
	supervisor.PhaseInitializing: {may: opStart | opPlans, must: opStart, startStages: []startStage{startPreflight, startWebhooks}},
	supervisor.PhaseElecting: {may: opStart | opStandDown | opPlans | opRequests, must: opStart | opStandDown,
		startStages: []startStage{startElecting}},
	supervisor.PhaseRecovering: {may: opStart | opPlans | opRequests, must: opStart, startStages: []startStage{startStores}},
	supervisor.PhaseStarting: {may: opStart | opPlans | opRequests, must: opStart,
		startStages: []startStage{startControllers, startRunnables}},
	supervisor.PhaseRunning: {may: opPlans | opRequests},
	supervisor.PhaseShuttingDown: {may: opShutdown | opStandDown | opRequests, must: opShutdown,
		shutdownStages: []shutdownStage{shutdownStopping, shutdownReleasing}},
	supervisor.PhaseStopped: {may: opShutdown | opStandDown, must: opShutdown, shutdownStages: []shutdownStage{shutdownDone}},
	supervisor.PhaseFailed: {may: opShutdown | opStandDown | opRequests, must: opShutdown,
		shutdownStages: []shutdownStage{shutdownDone}},
}

// checkOps checks, once a message has been handled, that the operations in
// flight are those the phase allows (phaseOps). A breach is a bug of this
// package, as an illegal move is: it panics, naming the phase and the
// operations, which Receive turns into an internal error.
func (s *root) checkOps() {
	var o op
	if s.start != nil {
		o |= opStart
	}
	if s.fencing != nil {
		o |= opStandDown
	}
	if s.shutdown != nil {
		o |= opShutdown
	}
	if len(s.plans) > 0 {
		o |= opPlans
	}
	if len(s.requests) > 0 {
		o |= opRequests
	}
	allowed := phaseOps[s.phase]
	if extra := o &^ allowed.may; extra != 0 {
		panic(fmt.Sprintf("supervisor: %s in flight in phase %s", extra, s.phase))
	}
	if allowed.must != 0 && o&allowed.must == 0 {
		panic(fmt.Sprintf("supervisor: phase %s without %s", s.phase, strings.ReplaceAll(allowed.must.String(), ", ", " or ")))
	}
	if s.start != nil && !slices.Contains(allowed.startStages, s.start.stage) {
		panic(fmt.Sprintf("supervisor: a start round at stage %s in phase %s", s.start.stage, s.phase))
	}
	if s.shutdown != nil && !slices.Contains(allowed.shutdownStages, s.shutdown.stage) {
		panic(fmt.Sprintf("supervisor: the shutdown at stage %s in phase %s", s.shutdown.stage, s.phase))
	}
}
