package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// barrier waits for a set of children to reach their next Started,
// StartFailed or Stopped, then runs its continuation once. A child may be
// waited on by several barriers (a StopChild arriving while a restart stops
// it); its next report settles them all. A start that ends in Stopped (it was
// stopped while starting) settles a barrier with errInterrupted.
type barrier struct {
	left     int
	err      error
	failFast bool // for starts: continue with the first error
	// skipStopped: for a start round, a child stopped while it started
	// (its shard lost or handed over) is left out instead of failing it.
	skipStopped bool
	done        bool // the continuation has run, or the owner gave up on it
	then        func(err error)
}

var errInterrupted = errors.New("supervisor: start interrupted by a stop")

func (b *barrier) add(rec *childRecord) {
	b.left++
	rec.waits = append(rec.waits, b)
}

func (b *barrier) settle(err error) {
	if b.done {
		return
	}
	b.left--
	if err != nil && b.err == nil {
		b.err = err
		if b.failFast {
			b.done = true
			b.then(err)
			return
		}
	}
	if b.left <= 0 {
		b.done = true
		b.then(b.err)
	}
}

// settleChild settles every barrier waiting on rec with err (a start
// barrier settled by a stop gets errInterrupted instead when interrupted is
// set).
func settleChild(rec *childRecord, err error, interrupted bool) {
	errFor := func(b *barrier) error {
		if interrupted && b.skipStopped {
			return nil
		}
		if interrupted && b.failFast {
			return errInterrupted
		}
		return err
	}
	switch len(rec.waits) {
	case 0:
	case 1: // the usual case: reuse the slice, a continuation may wait again
		b := rec.waits[0]
		rec.waits[0] = nil
		rec.waits = rec.waits[:0]
		b.settle(errFor(b))
	default:
		waits := rec.waits
		rec.waits = nil
		for _, b := range waits {
			b.settle(errFor(b))
		}
	}
}

// startAll starts recs in parallel with ctx (which carries the start
// deadline, if any) and continues with the first error (failing fast) or nil
// once all have started or been stopped meanwhile (a start round goes on
// without the controllers of a shard lost or handed over while they
// started; a round abandoned altogether is told apart by its owner).
func (s *root) startAll(recs []*childRecord, ctx context.Context, then func(err error)) {
	if len(recs) == 0 {
		then(nil)
		return
	}
	b := &barrier{failFast: true, skipStopped: true, then: then}
	for _, rec := range recs {
		b.add(rec)
		s.startChild(rec, ctx, 0)
	}
}

// startChild sends Start for a new incarnation of rec, its start call on a
// context of its own derived from ctx, bounded by timeout when positive.
func (s *root) startChild(rec *childRecord, ctx context.Context, timeout time.Duration) {
	s.gen++
	rec.gen = s.gen
	rec.unhealthy = 0
	rec.startedAt = time.Time{}
	s.setState(rec, StateStarting)
	start := actors.Start{Gen: rec.gen, Ctx: ctx, Timeout: timeout}
	if rec.pid == nil {
		rec.pid = s.spawner.Spawn(s.ctx, rec.spec, &start)
		return
	}
	s.ctx.Send(rec.pid, start)
}

// stopAll shuts down every active child of recs in parallel with ctx and
// continues once all have stopped. Children not active are stopped already.
func (s *root) stopAll(recs []*childRecord, ctx context.Context, then func()) {
	b := &barrier{then: func(error) { then() }}
	for _, rec := range recs {
		if !rec.state.active() {
			continue
		}
		b.add(rec)
		if rec.state != StateStopping {
			s.setState(rec, StateStopping)
			s.ctx.Send(rec.pid, actors.Stop{Ctx: ctx})
		}
	}
	if b.left == 0 {
		b.done = true
		then()
	}
}

func (s *root) current(name string, gen uint64) *childRecord {
	rec, ok := s.byName[name]
	if !ok || rec.gen != gen {
		return nil
	}
	return rec
}

func (s *root) onChildStarted(m actors.Started) {
	rec := s.current(m.Name, m.Gen)
	if rec == nil || rec.state != StateStarting {
		return
	}
	s.setState(rec, StateRunning)
	rec.startedAt = s.now()
	rec.healthy, rec.message = true, ""
	s.publish(ChildStarted, rec, nil)
	settleChild(rec, nil, false)
}

func (s *root) onChildStartFailed(m actors.StartFailed) {
	rec := s.current(m.Name, m.Gen)
	if rec == nil || rec.state != StateStarting {
		return
	}
	s.setState(rec, StateFailed)
	s.recordFailure(rec, m.Err)
	if len(rec.waits) > 0 {
		settleChild(rec, m.Err, false) // the continuation decides: fail the start, or supervise
		return
	}
	s.supervise(rec, m.Err)
}

func (s *root) onChildStopped(m actors.Stopped) {
	rec := s.current(m.Name, m.Gen)
	if rec == nil || rec.state != StateStopping {
		return
	}
	s.setState(rec, StateStopped)
	if m.Err != nil {
		s.logFailure("child panicked in Shutdown", rec, m.Err)
	}
	s.publish(ChildStopped, rec, m.Err)
	settleChild(rec, nil, true) // a start barrier waiting on it: the start was interrupted
}

func (s *root) onChildFailed(m actors.Failed) {
	rec := s.current(m.Name, m.Gen)
	if rec == nil || rec.state != StateRunning {
		return
	}
	s.recordFailure(rec, m.Err)
	s.supervise(rec, m.Err)
}

// recordFailure counts and publishes one failure of rec.
func (s *root) recordFailure(rec *childRecord, err error) {
	rec.failures++
	rec.lastErr = err
	rec.healthy = false
	rec.message = err.Error()
	s.logFailure("child failed", rec, err)
	s.publish(ChildFailed, rec, err)
}

// logFailure logs a failure of rec once; a panic with its stack, as klog
// and controller-runtime do, since the PanicError's message leaves it out.
func (s *root) logFailure(msg string, rec *childRecord, err error) {
	var pe *actors.PanicError
	if errors.As(err, &pe) {
		s.cfg.Logger.Error(msg, "child", rec.spec.Name, "kind", rec.spec.Kind, "err", err,
			"panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return
	}
	s.cfg.Logger.Error(msg, "child", rec.spec.Name, "kind", rec.spec.Kind, "err", err)
}
