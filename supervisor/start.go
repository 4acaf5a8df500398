package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
)

// startAttempt is a Start in progress.
type startAttempt struct {
	replyTo *actor.PID
	ctx     context.Context // the caller's, cancelled once the start has ended
	cancel  context.CancelFunc
	timeout time.Duration
	// bounded is ctx with the start timeout, from Recovering on.
	bounded       context.Context
	cancelBounded context.CancelFunc
}

// The supervisor's own messages for starting.
type (
	// preflightDone: Context.Start returned.
	preflightDone struct {
		attempt *startAttempt
		err     error
	}
	// startExpired: the start context ended: the caller's context (its
	// cancel or its deadline), or startTimeout (failStart tells them apart).
	startExpired struct {
		attempt *startAttempt
		err     error
	}
)

func (s *root) onStartManager(m StartManager, replyTo *actor.PID) {
	if s.phase != PhaseIdle {
		err := ErrStartTwice
		if s.phase.Ended() {
			err = fmt.Errorf("%w: it has stopped (%s)", ErrStartTwice, s.phase)
		}
		s.respond(replyTo, nil, err)
		return
	}
	err := m.Err
	if err == nil {
		err = validateSpecs(m.Children, nil)
	}
	if err == nil {
		err = s.validateShards(m.Children)
	}
	if err != nil {
		s.setPhase(PhaseInitializing)
		s.respond(replyTo, nil, err)
		s.beginShutdown(err, s.boundedContext())
		return
	}
	base := m.Ctx
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	a := &startAttempt{replyTo: replyTo, ctx: ctx, cancel: cancel, timeout: m.StartTimeout}
	s.start = a
	s.startTimeout = m.StartTimeout
	context.AfterFunc(ctx, func() { s.sendSelf(startExpired{attempt: a, err: context.Cause(ctx)}) })

	s.children = slices.Grow(s.children, len(m.Children))
	if len(s.byName) == 0 {
		s.byName = make(map[string]*childRecord, len(m.Children))
	}
	for _, spec := range m.Children {
		s.addRecord(spec)
	}
	s.setPhase(PhaseInitializing)
	preflight := s.cfg.Preflight
	go func() {
		var err error
		if preflight != nil {
			err = actors.Call("context", "manager", "Start", func() error { return preflight(ctx) })
		}
		s.sendSelf(preflightDone{attempt: a, err: err})
	}()
}

// addRecord records a child, in StatePending, and spawns its actor unless it
// is a controller.
func (s *root) addRecord(spec actors.Spec) *childRecord {
	rec := &childRecord{spec: spec, healthy: true}
	rec.waits = rec.waitBuf[:0]
	if spec.Kind != actors.KindController {
		// A controller's actor is spawned by its first start (startChild):
		// one message less per controller, and a standby hosts none.
		rec.pid = s.spawner.Spawn(s.ctx, spec, nil)
	}
	s.setState(rec, StatePending)
	s.children = append(s.children, rec)
	s.byName[spec.Name] = rec
	s.publishWebhook(rec)
	return rec
}

func (s *root) onPreflightDone(m preflightDone) {
	if m.attempt != s.start || s.phase != PhaseInitializing {
		return
	}
	if m.err != nil {
		s.failStart(fmt.Errorf("cannot start context: %w", m.err))
		return
	}
	if s.cfg.Mode != ModeWebhooks {
		// The pre-flight is done: the manager passes readiness from here on,
		// also as a standby waiting for the lease.
		s.obs.ready.Store(true)
	}
	a := s.start
	s.startAll(s.ofKind(actors.KindWebhook), a.ctx, func(err error) {
		if s.start != a {
			return // the start has ended (shut down, or timed out) meanwhile
		}
		if err != nil {
			s.failStart(fmt.Errorf("cannot start webhooks: %w", err))
			return
		}
		s.startProbes() // webhooks serve from now on, standby or not
		switch s.cfg.Mode {
		case ModeControllers:
			s.elect()
		default:
			s.obs.ready.Store(true)
			s.obs.starting.Store(true)
			s.finishStart()
		}
	})
}

// elect enters Electing, or goes straight on when election is off.
func (s *root) elect() {
	if s.cfg.Elector == nil {
		s.recoverStores()
		return
	}
	s.setPhase(PhaseElecting)
	if s.elector == nil {
		s.elector = s.ctx.SpawnPrefix(s.cfg.Elector, "elector")
	}
	if s.leader && s.fencing == nil && s.start != nil {
		// Sharded: the elector runs on across a fencing, and a shard
		// acquired meanwhile waited for it to end.
		s.recoverStores()
	}
}

// recoverStores enters Recovering; from here on the start timeout applies.
func (s *root) recoverStores() {
	a := s.start
	s.obs.starting.Store(true)
	// The round's own context, cancelled when the round ends or is
	// abandoned (a lost lease with Reelect), so that no start call of an
	// abandoned round runs on beside the next round's.
	if a.timeout <= 0 {
		a.bounded, a.cancelBounded = context.WithCancel(a.ctx)
	} else {
		a.bounded, a.cancelBounded = context.WithTimeout(a.ctx, a.timeout)
		bounded := a.bounded
		context.AfterFunc(bounded, func() {
			if errors.Is(context.Cause(bounded), context.DeadlineExceeded) {
				s.sendSelf(startExpired{attempt: a,
					err: fmt.Errorf("start timed out after %s: %w", a.timeout, context.DeadlineExceeded)})
			}
		})
	}
	s.setPhase(PhaseRecovering)
	s.startAll(s.toStart(actors.KindStore), a.bounded, func(err error) {
		if s.start != a {
			return
		}
		if err != nil {
			s.failStart(fmt.Errorf("cannot recover stores: %w", err))
			return
		}
		s.setPhase(PhaseStarting)
		s.startAll(s.toStart(actors.KindController), a.bounded, func(err error) {
			if s.start != a {
				return
			}
			if err != nil {
				s.failStart(fmt.Errorf("cannot start controllers: %w", err))
				return
			}
			s.finishStart()
		})
	})
}

// finishStart starts the plain runnables (there is nothing to call) and
// enters Running.
func (s *root) finishStart() {
	a := s.start
	s.startAll(s.toStart(actors.KindRunnable), a.ctx, func(error) {})
	if s.cfg.Mode == ModeBase {
		s.obs.starting.Store(true)
	}
	s.obs.started.Store(true)
	s.setPhase(PhaseRunning)
	s.endStart(nil)
	s.startProbes()
}

// onStartExpired ends a start whose context ended. startTimeout passing is
// a failure: the manager ends Failed. The caller's context ending is the
// caller asking to stop (a SIGTERM while a standby waits for the lease): the
// manager shuts down as ShutdownAndWait would and ends Stopped, Err nil (see
// failStart), so that the outcome does not depend on whether
// ShutdownAndWait, the cancellation or a child's reaction to it reaches the
// supervisor first.
func (s *root) onStartExpired(m startExpired) {
	if m.attempt != s.start {
		return
	}
	switch s.phase {
	case PhaseInitializing, PhaseElecting, PhaseRecovering, PhaseStarting:
		s.failStart(m.err)
	}
}

// failStart ends a start that failed: the caller gets err, and the manager
// shuts down what it started and ends in Failed with err. When the caller's
// context has ended, whatever failed did so because of it (a Run returning
// its context's error): the caller asked to stop, and the manager ends
// Stopped, Err nil, as after ShutdownAndWait.
func (s *root) failStart(err error) {
	if a := s.start; a != nil && a.ctx.Err() != nil {
		s.endStart(fmt.Errorf("start ended by its caller's context: %w", err))
		s.beginShutdown(nil, s.boundedContext())
		return
	}
	s.beginShutdown(err, s.boundedContext())
}

// endStart answers the Start request and releases its contexts.
func (s *root) endStart(err error) {
	a := s.start
	if a == nil {
		return
	}
	s.start = nil
	s.respond(a.replyTo, nil, err)
	if a.cancelBounded != nil {
		a.cancelBounded()
	}
	a.cancel()
}

func (s *root) ofKind(kind actors.Kind) []*childRecord {
	var recs []*childRecord
	for _, rec := range s.children {
		if rec.spec.Kind == kind {
			recs = append(recs, rec)
		}
	}
	return recs
}

// validateSpecs is the one validation of a manager's children, for Specs
// (which names them first) and for StartManager: it reports, at once,
// why each child could not be classified or named (namingErrs[i], when
// non-nil), every nil value, empty name and duplicate name, each naming the
// child by its position.
func validateSpecs(specs []actors.Spec, namingErrs []error) error {
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
			errs = append(errs, fmt.Errorf("children #%d and #%d are both named %q", j, i, spec.Name))
			continue
		}
		seen[spec.Name] = i
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid children: %w", errors.Join(errs...))
	}
	return nil
}

// validateShards reports a controller pinned to a shard that does not exist.
func (s *root) validateShards(specs []actors.Spec) error {
	n := max(len(s.shards), 1)
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
