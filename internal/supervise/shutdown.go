package supervise

import (
	"context"
	"errors"
	"fmt"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"
)

// shutdownStage is where a shutdown is, in this order.
type shutdownStage uint8

const (
	shutdownStopping  shutdownStage = iota // every active child's Shutdown runs, in parallel
	shutdownReleasing                      // all have returned: the lease is being given up
	shutdownDone                           // the manager has stopped
)

var shutdownStageNames = [...]string{"stopping", "releasing", "done"}

func (st shutdownStage) String() string { return shutdownStageNames[st] }

// shutdownMoves is every move of a shutdown's stage: the children stop,
// then the lease is released (skipped when there is none to release), then
// done.
var shutdownMoves = map[shutdownStage][]shutdownStage{
	shutdownStopping:  {shutdownReleasing, shutdownDone},
	shutdownReleasing: {shutdownDone},
	shutdownDone:      nil,
}

// become is the one way a shutdown's stage moves (moveStage).
func (a *shutdownAttempt) become(to shutdownStage) {
	a.stage = moveStage("shutdown", a.stage, to, shutdownMoves)
}

// shutdownAttempt is a shutdown in progress, the root's from its beginning
// on.
type shutdownAttempt struct {
	s       *root
	stage   shutdownStage
	wait    *barrier
	cause   error // why: nil when requested
	waiters []*actor.PID
	// lastShard holds the hand-over of the last shard held when the
	// shutdown began, done once every child has stopped (releaseLease).
	lastShard []*shardRelease

	// A shutdown that nobody asked for (an escalation, a failed start, a
	// lost lease with Exit) is bounded: see bound.
	watch   *childactor.ShutdownWatch
	overdue clock.Timer
}

type (
	// shutdownOverdue: a failure's shutdown has not finished within
	// Timing.ShutdownTimeout.
	// There is one shutdown in a manager's life: the root's.
	shutdownOverdue struct{}
	// shutdownReport: where the Shutdown calls that an overdue shutdown
	// waits for are stuck, found off the mailbox.
	shutdownReport struct {
		attempt *shutdownAttempt
		stuck   []supervisor.Unstopped
	}
)

func (s *root) onShutdownManager(m supervisor.ShutdownManager, replyTo *actor.PID) {
	switch a := s.state.shutdown(); {
	case s.state.phase().Ended():
		s.respond(replyTo, nil, nil)
	case a != nil:
		a.waiters = append(a.waiters, replyTo)
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
// the lease is given up and the manager stops. With sharding, each shard is
// given up as soon as its own controllers have returned.
//
// waiters are answered once the manager has stopped.
func (s *root) beginShutdown(cause error, ctx context.Context, waiters ...*actor.PID) {
	if s.ending() {
		return
	}
	a := &shutdownAttempt{s: s, cause: cause, waiters: waiters}
	round := s.state.round()
	s.obs.ready.Store(false)
	s.become(endPhase{at: supervisor.PhaseShuttingDown, shut: a, fence: s.state.standingDown()}, "shutdown")
	if round != nil {
		err := cause
		if err == nil {
			err = fmt.Errorf("%w: %w", supervisor.ErrShutdown, context.Canceled)
		}
		round.end(err)
	}
	s.quiesce(everyChild)
	s.probe.stop()
	s.lifetime.end()
	if cause != nil {
		ctx = a.bound(ctx)
	}
	s.watchStopping(ctx)
	sharded := s.shards.sharded() && s.elector != nil
	if a.wait = s.stopAll(a, s.reg.children, ctx); a.wait == nil {
		a.releaseLease()
	}
	if sharded && a.stage == shutdownStopping {
		// A replica that is shutting down takes no shard: the elector
		// leaves the membership now and hands each held shard back
		// (onShardReleasing) as soon as that shard's controllers have
		// stopped, so that the others take them on the watch event rather
		// than once every child here has stopped.
		s.ctx.Send(s.elector, resignMessage)
	}
}

// bound bounds a shutdown that nobody asked for: nobody waits for it with
// a context of their own, and a Shutdown call that hangs would leave the
// manager in ShuttingDown for ever, Done open and the lease renewed while
// nothing runs on it. Once Timing.ShutdownTimeout has passed the manager
// ends Failed anyway, its Err naming the cause and, with their stacks, the
// children whose Shutdown has not returned (onOverdue, onReport). The
// lease is not given up then, since those children may still run: the
// renewals stop and the lease expires on its own. It returns ctx carrying
// the watch of those Shutdown calls.
func (a *shutdownAttempt) bound(ctx context.Context) context.Context {
	s := a.s
	a.watch = childactor.NewShutdownWatch()
	a.overdue = s.cfg.Clock.AfterFunc(s.cfg.Timing.ShutdownTimeout, s.self.after(func() any { return shutdownOverdue{} }))
	return childactor.WithShutdownWatch(ctx, a.watch)
}

// onOverdue: the root's shutdown, if any, was bounded (bound) and its
// time is up: where its Shutdown calls are stuck is found off the mailbox.
func (a *shutdownAttempt) onOverdue() {
	if a == nil || a.s.state.phase().Ended() {
		return
	}
	s, watch := a.s, a.watch
	go func() { // a dump of every goroutine's stack: not on the mailbox
		s.self.send(shutdownReport{attempt: a, stuck: watch.Unstopped()})
	}()
}

// onReport fails the manager whose bounded shutdown is overdue, naming
// the children stuck in Shutdown (stuck, from onOverdue's dump).
func (a *shutdownAttempt) onReport(stuck []supervisor.Unstopped) {
	s := a.s
	if a != s.state.shutdown() || s.state.phase().Ended() {
		return
	}
	var active []string
	for _, rec := range s.reg.children {
		if rec.state.Active() {
			active = append(active, fmt.Sprintf("%s %q", rec.spec.Kind, rec.spec.Name))
		}
	}
	if len(active) == 0 {
		return // all stopped meanwhile: the lease is being given up
	}
	if len(stuck) == 0 { // returned between the dump and now, or not watched: name them at least
		for _, rec := range s.reg.children {
			if rec.state.Active() {
				stuck = append(stuck, supervisor.Unstopped{Name: rec.spec.Name, Kind: rec.spec.Kind, Call: "Shutdown"})
			}
		}
	}
	uerr := &supervisor.UnstoppedError{Children: stuck}
	s.cfg.Logger.Error("shutdown after a failure did not complete: the manager fails without giving the lease up",
		"cause", a.cause, "timeout", s.cfg.Timing.ShutdownTimeout, "err", uerr)
	for _, u := range stuck {
		s.cfg.Logger.Error("child did not stop", "child", u.Name, "kind", u.Kind, "call", u.Call, "for", u.For,
			"goroutine", u.Goroutine, "stack", u.Stack)
	}
	a.cause = errors.Join(a.cause, uerr)
	a.finish()
}

// watchStopping lets the actors.ShutdownWatch in ctx, if any, watch the
// Shutdown calls already running (a restart's, a StopChild's, an earlier
// shutdown's): a second Stop runs no second Shutdown, it adds the running
// one to its watch, so that a ShutdownAndWait that gives up can name every
// child that has not stopped.
func (s *root) watchStopping(ctx context.Context) {
	if childactor.ShutdownWatchFrom(ctx) == nil {
		return
	}
	for _, rec := range s.reg.children {
		if rec.state == supervisor.StateStopping {
			if rec.piped() != nil {
				rec.piped().revoked = true // this Stop revokes a restart sent along
			}
			s.ctx.Send(rec.pid, childactor.Stop{Ctx: ctx})
		}
	}
}

func (a *shutdownAttempt) current(b *barrier) bool {
	return a.s.state.shutdown() == a && a.stage == shutdownStopping && a.wait == b
}
func (a *shutdownAttempt) settled(*barrier, error) { a.releaseLease() }

// releaseLease gives the lease up, now that every child has stopped: the
// last shard's hand-over waited for that (shardRelease).
func (a *shutdownAttempt) releaseLease() {
	s := a.s
	a.become(shutdownReleasing)
	a.wait = nil
	for _, r := range a.lastShard {
		r.handOver()
	}
	a.lastShard = nil
	if s.elector == nil {
		a.finish()
		return
	}
	s.ctx.Send(s.elector, resignMessage)
}

// finish ends the manager: Stopped after a requested shutdown, Failed
// otherwise; then its actors stop.
func (a *shutdownAttempt) finish() {
	s := a.s
	if s.state.phase().Ended() {
		return
	}
	cause := a.cause
	a.become(shutdownDone)
	if a.overdue != nil {
		a.overdue.Stop()
	}
	s.shards.dropAll()
	end := endPhase{at: supervisor.PhaseStopped, shut: a, fence: s.state.standingDown()}
	if cause != nil {
		s.cfg.Logger.Error("manager failed", "err", cause)
		end.at = supervisor.PhaseFailed
		s.become(end, "failed")
	} else {
		s.become(end, "shut down")
	}
	s.out.flushActive() // Observed's active set is final before Done closes
	final := s.status()
	final.Err = cause
	s.treeStopped()
	s.obs.finish(cause, final)
	for _, w := range a.waiters {
		s.respond(w, nil, nil)
	}
	s.out.closeBus = true // once the message's events are published (flush)
	s.ctx.Stop(s.self.pid)
}
