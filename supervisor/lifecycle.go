package supervisor

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
)

// lifecycleRecord checks that a lifecycle message can act now and returns
// the child it names.
func (s *root) lifecycleRecord(msg any, name string) (*childRecord, error) {
	if s.phase != PhaseRunning {
		if s.phase.Ended() {
			return nil, fmt.Errorf("%s: %w", describe(msg), ErrStopped)
		}
		return nil, fmt.Errorf("%s: %w (phase %s)", describe(msg), ErrNotRunning, s.phase)
	}
	rec, err := s.record(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", action(msg), err) // err names the child
	}
	return rec, nil
}

func (s *root) busy(rec *childRecord) bool {
	return rec.plan != nil || rec.state == StateStarting || rec.state == StateStopping
}

func (s *root) onRestartChild(m RestartChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(m, m.Name)
	if err == nil && rec.spec.Kind == actors.KindRunnable {
		err = fmt.Errorf("RestartChild %q: %w", m.Name, ErrNothingToStart)
	}
	s.restartOnRequest(rec, err, "RestartChild", replyTo)
}

func (s *root) onStartChild(m StartChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(m, m.Name)
	if err == nil && rec.state == StateRunning && !s.busy(rec) {
		err = fmt.Errorf("StartChild %q: %w", m.Name, ErrAlreadyRunning)
	}
	s.restartOnRequest(rec, err, "StartChild", replyTo)
}

// restartOnRequest is RestartChild and StartChild once their own checks
// (err) have passed: rec is shut down if it is active (a Failed child still
// owes its Shutdown), then restarted, and op's requester is answered once
// the start call has returned.
func (s *root) restartOnRequest(rec *childRecord, err error, op string, replyTo *actor.PID) {
	if err == nil && s.busy(rec) {
		err = fmt.Errorf("%s %q: %w (%s)", op, rec.spec.Name, ErrBusy, rec.state)
	}
	if err == nil && !s.leaseHeld(rec) {
		err = fmt.Errorf("%s %q: %w (shard %d)", op, rec.spec.Name, ErrShardNotHeld, rec.spec.Shard)
	}
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	rec.stopRequested = false
	s.stopAll([]*childRecord{rec}, s.boundedContext(), func() {
		if s.phase != PhaseRunning {
			s.respond(replyTo, nil, fmt.Errorf("%s %q: %w", op, rec.spec.Name, ErrShutdown))
			return
		}
		if !s.leaseHeld(rec) {
			s.respond(replyTo, nil, fmt.Errorf("%s %q: stopped, but %w meanwhile (shard %d)", op, rec.spec.Name, ErrShardNotHeld, rec.spec.Shard))
			return
		}
		s.restart(rec, s.answerStart(rec, replyTo, op))
	})
}

// answerStart is the continuation of a start that a lifecycle message asked
// for: it answers the requester once the start call has returned; a failed
// start is then supervised like any failure.
func (s *root) answerStart(rec *childRecord, replyTo *actor.PID, op string) func(error) {
	return func(err error) {
		if err != nil {
			s.respond(replyTo, nil, fmt.Errorf("%s %q: %w", op, rec.spec.Name, err))
			if err != errInterrupted {
				s.supervise(rec, err)
			}
			return
		}
		s.respond(replyTo, nil, nil)
	}
}

func (s *root) onStopChild(m StopChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(m, m.Name)
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	s.stopForGood(rec, func() { s.respond(replyTo, nil, nil) })
}

// stopForGood takes rec out of supervision and any restart plan, and shuts
// it down.
func (s *root) stopForGood(rec *childRecord, then func()) {
	rec.stopRequested = true
	s.quiesce(onlyChild(rec))
	if rec.state == StatePending {
		s.setState(rec, StateStopped)
	}
	s.stopAll([]*childRecord{rec}, s.boundedContext(), then)
}

func (s *root) onAddChild(m AddChild, replyTo *actor.PID) {
	if s.phase != PhaseRunning {
		s.respond(replyTo, nil, fmt.Errorf("AddChild: %w (phase %s)", ErrNotRunning, s.phase))
		return
	}
	// Naming may call user code (Name, GetHealth): do it off the mailbox.
	mode, timeout, shardOf := s.cfg.Mode, s.cfg.Timing.HealthTimeout, s.cfg.ShardOf
	if !s.sharded() {
		shardOf = nil
	}
	go func() {
		spec, err := classify(mode, m.Runnable)
		if err == nil {
			spec.Name = m.Name
			if spec.Name == "" {
				spec.Name, err = actors.ResolveName(m.Runnable, timeout)
			}
			if err == nil && spec.Name == "" {
				err = fmt.Errorf("%s %T has no name: give AddChild a Name", spec.Kind, m.Runnable)
			}
			if err == nil && spec.Kind == actors.KindController && shardOf != nil {
				spec.Shard = shardOf(spec.Name)
			}
		}
		s.sendSelf(childNamed{spec: spec, err: err, replyTo: replyTo})
	}()
}

// childNamed: an AddChild's child has been named (or could not be).
type childNamed struct {
	spec    actors.Spec
	err     error
	replyTo *actor.PID
}

func (s *root) onChildNamed(m childNamed) {
	err := m.err
	if err == nil && s.phase != PhaseRunning {
		err = fmt.Errorf("%w (phase %s)", ErrNotRunning, s.phase)
	}
	if err == nil {
		if _, dup := s.byName[m.spec.Name]; dup {
			err = fmt.Errorf("%w: a child named %q already exists", ErrDuplicateChild, m.spec.Name)
		}
	}
	if err != nil {
		s.respond(m.replyTo, nil, fmt.Errorf("AddChild: %w", err))
		return
	}
	rec := s.addRecord(m.spec)
	if !s.leaseHeld(rec) {
		// Pinned to a shard this replica does not hold: it starts when the
		// shard is acquired, here or on another replica.
		s.respond(m.replyTo, nil, nil)
		return
	}
	s.startIncarnation(rec, s.answerStart(rec, m.replyTo, "AddChild"))
}

func (s *root) onRemoveChild(m RemoveChild, replyTo *actor.PID) {
	rec, err := s.lifecycleRecord(m, m.Name)
	if err != nil {
		s.respond(replyTo, nil, err)
		return
	}
	s.stopForGood(rec, func() {
		if s.byName[rec.spec.Name] != rec {
			s.respond(replyTo, nil, nil) // removed meanwhile by an earlier RemoveChild
			return
		}
		delete(s.byName, rec.spec.Name)
		s.children = deleteRecord(s.children, rec)
		s.unpublishWebhook(rec)
		s.ctx.Stop(rec.pid)
		s.publish(ChildRemoved, rec, nil)
		s.respond(replyTo, nil, nil)
	})
}

func deleteRecord(recs []*childRecord, rec *childRecord) []*childRecord {
	for i, r := range recs {
		if r == rec {
			return append(recs[:i], recs[i+1:]...)
		}
	}
	return recs
}

// classify says what v is for a manager in mode; the Spec it returns has
// no name yet. A ControllerManager hosts Controllers, Webhooks and Stores; a
// WebhookManager hosts Webhooks; anything else that is a Runnable is a plain
// runnable, only shut down.
func classify(mode Mode, v any) (actors.Spec, error) {
	if v == nil {
		return actors.Spec{}, fmt.Errorf("child is nil")
	}
	kind := actors.KindRunnable
	switch {
	case mode == ModeControllers && isController(v):
		kind = actors.KindController
	case mode != ModeBase && isWebhook(v):
		kind = actors.KindWebhook
	case mode == ModeControllers && isStore(v):
		kind = actors.KindStore
	default:
		if _, ok := v.(actors.Runnable); !ok {
			return actors.Spec{}, fmt.Errorf("%T is neither a Controller, a Webhook, a Store nor a Runnable", v)
		}
	}
	return actors.Spec{Kind: kind, Impl: v}, nil
}

func isController(v any) bool { _, ok := v.(actors.Controller); return ok }
func isWebhook(v any) bool    { _, ok := v.(actors.Webhook); return ok }
func isStore(v any) bool      { _, ok := v.(actors.Store); return ok }
