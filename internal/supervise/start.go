package supervise

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// startStage is where a start round is. A round goes through them in this
// order; a round after a lost lease (Reelect) begins at startElecting.
type startStage uint8

const (
	startPreflight   startStage = iota // Context.Start runs, off the mailbox (Initializing)
	startWebhooks                      // webhooks start, standby or not (Initializing)
	startElecting                      // waiting for the lease (Electing); skipped without election
	startStores                        // stores recover, in parallel (Recovering)
	startControllers                   // controllers start, in parallel (Starting)
	startRunnables                     // plain runnables start; then Running
	startDone                          // the Start call has been answered
)

var startStageNames = [...]string{"preflight", "webhooks", "electing", "stores", "controllers", "runnables", "done"}

func (st startStage) String() string { return startStageNames[st] }

// startMoves is every move of a start round's stage: down the stages in
// order (electing skips to runnables in the modes without controllers), or
// to done from any (answered, failed, or abandoned by a stand-down).
var startMoves = map[startStage][]startStage{
	startPreflight:   {startWebhooks, startDone},
	startWebhooks:    {startElecting, startDone},
	startElecting:    {startStores, startRunnables, startDone},
	startStores:      {startControllers, startDone},
	startControllers: {startRunnables, startDone},
	startRunnables:   {startDone},
	startDone:        nil,
}

// become is the one way a round's stage moves (moveStage).
func (a *startAttempt) become(to startStage) {
	a.stage = moveStage("start round", a.stage, to, startMoves)
}

// next moves the round to the stage after its own.
func (a *startAttempt) next() { a.become(a.stage + 1) }

// startAttempt is a start round in progress: the Start call's, or the next
// round's after a lost lease (the Start call, if not answered yet, waits for
// it). It is the root's start while in flight; a round abandoned (a
// shutdown, a lost lease) is no longer, and its children's reports are
// dropped by its barrier.
type startAttempt struct {
	s       *root
	stage   startStage
	wait    *barrier // the children of stage being started
	replyTo *actor.PID
	// depth is the level whose stores recover now (startStores): the
	// root's first, then each group's after its parent's, deeper levels
	// after shallower ones.
	depth   int
	ctx     context.Context // the caller's, cancelled once the start has ended
	cancel  context.CancelFunc
	timeout time.Duration
	// bounded is ctx with the start timeout, from Recovering on.
	bounded       context.Context
	cancelBounded context.CancelFunc
	// stopped is the answer of a round its caller's context ended (fail),
	// given by the shutdown that ends it in place of the shutdown's own.
	stopped error
	// supervised: the manager has run (a round after a re-election whose
	// Start was answered): a child whose start call fails is supervised
	// like any failure (barrier.supervises), and the round goes on
	// without it, as a shard acquired while Running does (shardStart),
	// instead of failing the manager. A round a Start still waits for
	// fails it, as the first round does.
	supervised bool
}

// The supervisor's own messages for starting.
type (
	// preflightDone: Context.Start returned.
	preflightDone struct {
		attempt *startAttempt
		err     error
	}
	// startExpired: the start context ended: the caller's context (its
	// cancel or its deadline), or startTimeout (fail tells them apart).
	startExpired struct {
		attempt *startAttempt
		err     error
	}
)

func (s *root) onStartManager(m StartManager, replyTo *actor.PID) {
	if p := s.state.phase(); p != supervisor.PhaseIdle {
		err := supervisor.ErrStartTwice
		if p.Ended() {
			err = fmt.Errorf("%w: it has stopped (%s)", supervisor.ErrStartTwice, p)
		}
		s.respond(replyTo, nil, err)
		return
	}
	base := m.Ctx
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	a := &startAttempt{s: s, replyTo: replyTo, ctx: ctx, cancel: cancel, timeout: m.StartTimeout}
	s.startTimeout = m.StartTimeout
	err := m.Err
	if err == nil {
		err = validateSpecs(m.Children, nil)
	}
	if err == nil {
		err = checkBackoffs(s.tree, &s.reg, m.Children)
	}
	if err == nil {
		err = s.shards.validate(m.Children)
	}
	if err == nil {
		err = admit(m.Children) // last: a child told it is added is added
	}
	if err != nil {
		// The round fails before its first stage: the shutdown answers
		// the Start call with err.
		s.become(startPhase{at: supervisor.PhaseInitializing, start: a}, "start")
		s.beginShutdown(err, s.cfg.boundedContext())
		return
	}
	context.AfterFunc(ctx, func() { s.self.send(startExpired{attempt: a, err: context.Cause(ctx)}) })

	s.reg.grow(len(m.Children))
	for _, spec := range m.Children {
		s.addRecord(spec)
	}
	s.become(startPhase{at: supervisor.PhaseInitializing, start: a}, "start")
	a.step()
}

// addRecord records a child, in StatePending, and spawns its actor unless it
// is a controller or a group. A child inside a group (spec.Group, its
// parent's path: the path is an address, never read back) joins its
// group's level; the group is recorded before its children.
func (s *root) addRecord(spec childactor.Spec) *childRecord {
	rec := &childRecord{spec: spec, healthy: true, lvl: s.tree}
	if g := s.reg.groupNamed(spec.Group); g != nil {
		rec.lvl = g
	}
	if spec.Kind == actors.KindController && rec.lvl.shard > 0 {
		// Under a group of AddShardedGroup, however it was added (at
		// Start, or by AddChild, alone or in a group): its group's shard.
		rec.spec.Shard = rec.lvl.shard - 1
	}
	rec.lvl.children = append(rec.lvl.children, rec)
	rec.lvl.touch(s.clock.now())
	if spec.Kind.IsGroup() {
		rec.sub = newGroupLevel(rec, spec.Impl.(*GroupDecl))
		rec.state, rec.since = supervisor.StatePending, s.clock.now()
		s.reg.addGroup(rec)
		return rec
	}
	if spec.Kind != actors.KindController {
		// A controller's actor is spawned by its first start (startChild):
		// one message less per controller, and a standby hosts none.
		rec.pid = s.spawner.Spawn(s.ctx, &rec.spec, nil)
	}
	s.setState(rec, supervisor.StatePending)
	s.reg.add(rec)
	s.obs.addWebhook(rec)
	return rec
}

// preflightDone: the pre-flight (Context.Start) of round a returned err.
func (a *startAttempt) preflightDone(err error) {
	if a != a.s.state.round() || a.stage != startPreflight {
		return
	}
	if err != nil {
		a.fail(fmt.Errorf("cannot start context: %w", err))
		return
	}
	a.next()
	a.step()
}

// step runs the round from its stage on, top to bottom, until a stage must
// wait: for children to start (a barrier, which calls settled), for the
// pre-flight (preflightDone) or for the lease (onShardAcquired). Each stage begins
// only once the one before it has ended without an error.
func (a *startAttempt) step() {
	s := a.s
	for s.state.round() == a {
		switch a.stage {
		case startPreflight:
			preflight, ctx := s.cfg.Preflight, a.ctx
			go func() {
				var err error
				if preflight != nil {
					err = childactor.Call("context", "manager", "Start", func() error { return preflight(ctx) })
				}
				s.self.send(preflightDone{attempt: a, err: err})
			}()
			return
		case startWebhooks:
			if s.cfg.Mode != ModeWebhooks {
				// The pre-flight is done: the manager passes readiness from
				// here on, also as a standby waiting for the lease.
				s.obs.ready.Store(true)
			}
			if a.wait = s.startAll(a, s.reg.ofKind(actors.KindWebhook), a.ctx); a.wait != nil {
				return
			}
		case startElecting:
			s.probe.start() // webhooks serve from now on, standby or not
			if s.cfg.Mode != ModeControllers {
				s.obs.ready.Store(true)
				s.obs.starting.Store(true)
				a.become(startRunnables)
				continue
			}
			if s.cfg.Elector != nil {
				fence := s.state.standingDown()
				s.become(electPhase{start: a, fence: fence}, "waiting for the lease")
				if s.elector == nil {
					s.elector = s.ctx.SpawnPrefix(s.cfg.Elector, "elector")
				}
				if !s.shards.leader || fence != nil {
					return // onShardAcquired, or the stand-down's end, resumes the round
				}
			}
		case startStores:
			a.bound()
			s.obs.starting.Store(true)
			s.become(startPhase{at: supervisor.PhaseRecovering, start: a}, "the lease is held")
			if a.wait = a.startStage(a.storesAt(), a.bounded); a.wait != nil {
				return
			}
			if a.depth < s.reg.deepestStore() {
				a.depth++
				continue
			}
		case startControllers:
			s.become(startPhase{at: supervisor.PhaseStarting, start: a}, "stores recovered")
			if a.wait = a.startStage(a.toStart(actors.KindController), a.bounded); a.wait != nil {
				return
			}
		case startRunnables:
			// Plain runnables have no start call: nothing to wait for.
			s.startAll(ignoreReports{}, a.toStart(actors.KindRunnable), a.ctx)
			if s.cfg.Mode == ModeBase {
				s.obs.starting.Store(true)
			}
			s.obs.started.Store(true)
			s.become(runPhase{}, "started")
			a.end(nil)
			s.probe.start()
			return
		case startDone:
			return
		}
		a.wait = nil
		a.next()
	}
}

// startStage starts recs, stores or controllers, for the round's stage; a
// supervised round's barrier supervises a failed start (supervised).
func (a *startAttempt) startStage(recs []*childRecord, ctx context.Context) *barrier {
	b := a.s.startAll(a, recs, ctx)
	if b != nil {
		b.supervises = a.supervised
	}
	return b
}

// current reports whether the round still waits for b: it is the root's
// round and b is its stage's barrier.
func (a *startAttempt) current(b *barrier) bool { return a.s.state.round() == a && a.wait == b }

// settled ends the stage whose children b started: the first error fails
// the start, else the next stage begins.
func (a *startAttempt) settled(b *barrier, err error) {
	a.wait = nil
	if err != nil {
		a.fail(fmt.Errorf("cannot %s: %w", a.stage.failure(), err))
		return
	}
	if a.stage == startStores && a.depth < a.s.reg.deepestStore() {
		a.depth++ // the stores of the next level down
	} else {
		a.next()
	}
	a.step()
}

// failure is what failed when stage's children failed to start.
func (st startStage) failure() string {
	switch st {
	case startWebhooks:
		return "start webhooks"
	case startStores:
		return "recover stores"
	default:
		return "start controllers"
	}
}

// resume goes on with a round waiting for the lease, now held.
func (a *startAttempt) resume() {
	if a.stage == startElecting {
		a.next()
		a.step()
	}
}

// bound gives the round its own context from Recovering on, with the start
// timeout, cancelled when the round ends or is abandoned (a lost lease with
// Reelect), so that no start call of an abandoned round runs on beside the
// next round's.
func (a *startAttempt) bound() {
	s := a.s
	if a.timeout <= 0 {
		a.bounded, a.cancelBounded = context.WithCancel(a.ctx)
		return
	}
	a.bounded, a.cancelBounded = context.WithTimeout(a.ctx, a.timeout)
	bounded := a.bounded
	context.AfterFunc(bounded, func() {
		if errors.Is(context.Cause(bounded), context.DeadlineExceeded) {
			s.self.send(startExpired{attempt: a,
				err: fmt.Errorf("start timed out after %s: %w", a.timeout, context.DeadlineExceeded)})
		}
	})
}

// ignoreReports owns the starts nobody waits for: the plain runnables'.
type ignoreReports struct{}

func (ignoreReports) current(*barrier) bool   { return false }
func (ignoreReports) settled(*barrier, error) {}

// expired ends round a, if still the root's, whose context ended (err).
// startTimeout passing is a failure: the manager ends Failed. The caller's
// context ending is the caller asking to stop (a SIGTERM while a standby
// waits for the lease): the manager shuts down as ShutdownAndWait would and
// ends Stopped, Err nil (see fail), so that the outcome does not depend on
// whether ShutdownAndWait, the cancellation or a child's reaction to it
// reaches the supervisor first.
//
// A supervised round's start timeout ends its start calls, as it ends a
// restart's: each one still running is cancelled by its context (bounded)
// and, failed, supervised; the round goes on without it, and the manager
// does not fail on it.
func (a *startAttempt) expired(err error) {
	if a != a.s.state.round() || (a.supervised && errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	a.fail(err)
}

// fail ends round a, the root's, which failed: the caller gets err, and
// the manager shuts down what it started and ends in Failed with err. When
// the caller's context has ended, whatever failed did so because of it (a
// Run returning its context's error): the caller asked to stop, and the
// manager ends Stopped, Err nil, as after ShutdownAndWait.
func (a *startAttempt) fail(err error) {
	s := a.s
	if a.ctx.Err() != nil {
		a.stopped = fmt.Errorf("%w: %w", ErrStartAbandoned, err)
		s.beginShutdown(nil, s.cfg.boundedContext())
		return
	}
	s.beginShutdown(err, s.cfg.boundedContext())
}

// ErrStartAbandoned is the answer to a Start whose caller's context ended
// before the start did (fail), wrapping what that ending made fail: the
// facade words it with the caller's context error (its Start waits for
// this answer, so that what the manager says of itself afterwards agrees
// with it).
var ErrStartAbandoned = errors.New("start ended by its caller's context")

// newReelectionRound returns s's start round after a stand-down: it begins
// at startElecting, the round's entry after a lost lease (preflight has
// run and the webhooks stay up), and waits for the lease. A round in
// flight (prev) is abandoned, and its Start call, if not answered yet,
// waits for this one; the abandoned round is no longer the root's, so its
// barriers drop their children's reports.
func newReelectionRound(s *root, prev *startAttempt) *startAttempt {
	a := &startAttempt{s: s, stage: startElecting, timeout: s.startTimeout, supervised: prev == nil || prev.supervised}
	if prev != nil {
		a.replyTo, a.ctx, a.cancel = prev.abandon()
	} else {
		a.ctx, a.cancel = context.WithCancel(s.lifetime.context())
	}
	ctx := a.ctx
	context.AfterFunc(ctx, func() { s.self.send(startExpired{attempt: a, err: context.Cause(ctx)}) })
	return a
}

// abandon ends a round that a stand-down replaces, by its own move to
// done, and hands over the Start call it still has to answer.
func (a *startAttempt) abandon() (replyTo *actor.PID, ctx context.Context, cancel context.CancelFunc) {
	if a.cancelBounded != nil {
		a.cancelBounded()
	}
	a.become(startDone)
	return a.replyTo, a.ctx, a.cancel
}

// end ends round a, unless it has ended (or was abandoned) already: it
// answers the Start request (with err, or why its caller stopped it) and
// releases its contexts. What the phase becomes is its caller's, which
// moves it first, so that a Start call answered reads its outcome in the
// phase: Running, or the shutdown's.
func (a *startAttempt) end(err error) {
	if a.stage == startDone {
		return
	}
	if a.stopped != nil {
		err = a.stopped
	}
	a.become(startDone)
	a.s.respond(a.replyTo, nil, err)
	if a.cancelBounded != nil {
		a.cancelBounded()
	}
	a.cancel()
}

// toStart is what a start round starts of kind: every child of that kind
// but those stopped by StopChild, those still running (webhooks and plain
// runnables outlive a lost lease), those whose shard this replica does
// not hold, and those a decision in progress owns (a restart plan, a
// group's request still to start them: owned), which start them in turn.
// In a supervised round a group's controllers also wait for its stores
// (storesUp): one whose recovery failed in this round is being restarted,
// and they start once it has recovered (storeRecovered).
func (a *startAttempt) toStart(kind actors.Kind) []*childRecord {
	s := a.s
	var recs []*childRecord
	for _, rec := range s.reg.ofKind(kind) {
		if !rec.stopRequested && !rec.state.Active() && !owned(rec) && s.leaseHeld(rec) &&
			(!a.supervised || kind != actors.KindController || rec.lvl.storesUp()) {
			recs = append(recs, rec)
		}
	}
	return recs
}

// storesAt is what a start round recovers of the stores at the depth it
// is at (a.depth; 0: the root's own).
func (a *startAttempt) storesAt() []*childRecord {
	recs := a.toStart(actors.KindStore)
	return slices.DeleteFunc(recs, func(r *childRecord) bool { return r.lvl.depth != a.depth })
}

// validateSpecs is the one validation of a manager's children, for Specs
// (which names them first) and for StartManager: it reports, at once,
// why each child could not be classified or named (namingErrs[i], when
// non-nil), every nil value, empty name and duplicate name, each naming the
// child by its position.
func validateSpecs(specs []childactor.Spec, namingErrs []error) error {
	var errs []error
	seen := make(map[string]int, len(specs))
	for i, spec := range specs {
		if i < len(namingErrs) && namingErrs[i] != nil {
			errs = append(errs, fmt.Errorf("child #%d: %w", i, namingErrs[i]))
			continue
		}
		switch {
		case spec.Impl == nil:
			errs = append(errs, fmt.Errorf("child #%d is nil", i))
			continue
		case strings.TrimSpace(spec.Name) == "":
			errs = append(errs, fmt.Errorf("child #%d (%s %T) has an empty name", i, spec.Kind, spec.Impl))
			continue
		}
		if j, dup := seen[spec.Name]; dup {
			errs = append(errs, fmt.Errorf("children #%d and #%d are both named %q (%w)", j, i, spec.Name, supervisor.ErrDuplicateChild))
			continue
		}
		seen[spec.Name] = i
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid children: %w", errors.Join(errs...))
	}
	return nil
}

// validate reports a controller among specs pinned to a shard that does
// not exist.
func (t *shardTable) validate(specs []childactor.Spec) error {
	n := t.count()
	var errs []error
	for i, spec := range specs {
		if spec.Kind == actors.KindController && (spec.Shard < 0 || spec.Shard >= n) {
			errs = append(errs, fmt.Errorf("child #%d (controller %q) is pinned to shard %d of %d", i, spec.Name, spec.Shard, n))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid children: %w", errors.Join(errs...))
	}
	return nil
}
