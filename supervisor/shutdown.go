package supervisor

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
)

// shutdownAttempt is a shutdown in progress.
type shutdownAttempt struct {
	cause   error // why: nil when requested
	waiters []*actor.PID
}

func (s *root) onShutdownManager(m ShutdownManager, replyTo *actor.PID) {
	switch {
	case s.phase.Ended():
		s.respond(replyTo, nil, nil)
	case s.shutdown != nil:
		s.shutdown.waiters = append(s.shutdown.waiters, replyTo)
		s.watchStopping(m.Ctx)
	default:
		ctx := m.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		s.beginShutdown(nil, ctx, replyTo)
	}
}

// beginShutdown shuts the manager down with cause (nil when requested): the
// start in progress ends with an error, restarts and probes stop, every
// active child's Shutdown(ctx) runs in parallel, and once all have returned
// the lease is given up and the manager stops.
//
// waiters are answered once the manager has stopped.
func (s *root) beginShutdown(cause error, ctx context.Context, waiters ...*actor.PID) {
	if s.shutdown != nil || s.phase.Ended() {
		return
	}
	s.shutdown = &shutdownAttempt{cause: cause, waiters: waiters}
	if s.start != nil {
		err := cause
		if err == nil {
			err = fmt.Errorf("%w: %w", ErrShutdown, context.Canceled)
		}
		s.endStart(err)
	}
	for plan := range s.plans {
		s.cancelPlan(plan)
	}
	s.stopProbes()
	if s.endLifetime != nil {
		s.endLifetime()
	}
	s.obs.ready.Store(false)
	s.setPhase(PhaseShuttingDown)
	for _, rec := range s.children {
		rec.plan = nil
		if rec.state == StateBackingOff {
			s.setState(rec, StateStopped)
		}
	}
	s.watchStopping(ctx)
	s.stopAll(s.children, ctx, s.releaseLease)
}

// watchStopping lets the actors.ShutdownWatch in ctx, if any, watch the
// Shutdown calls already running (a restart's, a StopChild's, an earlier
// shutdown's): a second Stop runs no second Shutdown, it adds the running
// one to its watch, so that a ShutdownAndWait that gives up can name every
// child that has not stopped.
func (s *root) watchStopping(ctx context.Context) {
	if actors.ShutdownWatchFrom(ctx) == nil {
		return
	}
	for _, rec := range s.children {
		if rec.state == StateStopping {
			s.ctx.Send(rec.pid, actors.Stop{Ctx: ctx})
		}
	}
}

// releaseLease gives the lease up, now that every child has stopped.
func (s *root) releaseLease() {
	if s.elector == nil {
		s.finish()
		return
	}
	s.ctx.Send(s.elector, resignMessage)
}

// finish ends the manager: Stopped after a requested shutdown, Failed
// otherwise; then its actors stop.
func (s *root) finish() {
	if s.phase.Ended() {
		return
	}
	cause := s.shutdown.cause
	s.leader = false
	if cause != nil {
		s.cfg.Logger.Error("manager failed", "err", cause)
		s.setPhase(PhaseFailed)
	} else {
		s.setPhase(PhaseStopped)
	}
	s.obs.finish(cause, s.status())
	for _, w := range s.shutdown.waiters {
		s.respond(w, nil, nil)
	}
	s.bus.Close()
	s.ctx.Stop(s.self)
}
