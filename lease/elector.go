package lease

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// NewProps returns the Props of an elector actor, or an error when cfg is
// not one client-go accepts or leaves no time to fence (LeaseDuration must
// exceed RenewDeadline + RetryPeriod).
//
// It is the previous release's elector, client-go's polling LeaderElector,
// kept for compatibility: the manager no longer uses it (its single lease is
// shard 0 of lease/shard's Elector, which keeps client-go's record and
// rules, so that both kinds of replica share one Lease safely during a
// rolling upgrade).
//
// An elector campaigns as soon as it starts and reports to its parent:
// Elected once it holds the lease, NewLeader each time it observes a new
// holder, Lost if, having led, it could not renew the lease, and Released
// after a Resign. An elector runs one election: after Lost, the parent stops
// it and spawns another from the same Props to campaign again. Electors of
// one Props share the lock, so each waits until the previous one's election
// has ended before it campaigns: two never use the lock at once.
func NewProps(cfg Config) (*actor.Props, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	turn := make(chan struct{}, 1)
	return actor.PropsFromProducer(func() actor.Actor { return &elector{cfg: cfg, turn: turn} }), nil
}

// elector is the actor that runs one client-go LeaderElector. Its fields
// are owned by Receive; the election runs in a goroutine of its own.
type elector struct {
	cfg  Config
	turn chan struct{} // held by the goroutine running an election of these Props

	le        *leaderelection.LeaderElector
	cancel    context.CancelFunc
	resigning *atomic.Bool // set before cancel on Resign; read by the election goroutine
	check     *time.Timer  // the next renewalCheck while leading
	term      *term        // this election, as Config.Fence sees it

	leading bool // Elected was sent
	lost    bool // Lost was sent
	ended   bool // the election goroutine has returned
}

// The elector's own messages.
type (
	// startedLeading: client-go's OnStartedLeading ran.
	startedLeading struct{}
	// renewalCheck: time to check that renewals are not stalled.
	renewalCheck struct{}
	// electionEnded: the election goroutine has returned; err is a panic in
	// the lock or in client-go, or the failure to release the lease.
	electionEnded struct{ err error }
)

// Receive handles one message. It never blocks: the election runs in a
// goroutine, and client-go's callbacks come back as messages.
func (e *elector) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		e.run(ctx)
	case startedLeading:
		// After Resign or once the election has ended the lead is over
		// already: the parent must not start anything on it.
		if e.ended || e.resigning.Load() {
			return
		}
		e.leading = true
		ctx.Send(ctx.Parent(), Elected{Identity: e.cfg.Lock.Identity()})
		e.armCheck(ctx)
	case NewLeader:
		e.logHolder(m.Identity)
		ctx.Send(ctx.Parent(), m)
	case renewalCheck:
		e.onRenewalCheck(ctx)
	case Resign:
		e.stopCheck()
		e.term.end(reasonResigned)
		if e.ended {
			ctx.Send(ctx.Parent(), Released{})
			return
		}
		e.resigning.Store(true)
		e.cancel()
	case electionEnded:
		e.ended = true
		e.stopCheck()
		if e.leading {
			e.term.end(reasonLost)
		}
		e.term.end("election ended")
		if m.err != nil {
			e.cfg.Logger.Error("leader election ended with an error", "lock", e.cfg.Lock.Describe(), "err", m.err)
		}
		switch {
		case e.resigning.Load():
			ctx.Send(ctx.Parent(), Released{})
		case e.leading:
			e.lose(ctx, e.cfg.deadlineReason(m.err))
		}
	case *actor.Stopping:
		e.stopCheck()
		e.term.end("elector stopped")
		if e.cancel != nil {
			e.cancel()
		}
	}
}

// run starts the election in a goroutine. It waits for its turn on the
// lock, runs client-go's LeaderElector until it ends (a lost lease, or the
// context cancelled by Resign or Stopping), then, on Resign only, releases
// the lease if this replica still holds it.
//
// The election writes through a recordingLock, which publishes the send
// time of each successful renewal to the election's term of Config.Fence.
func (e *elector) run(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	send := func(m any) { system.Root.Send(self, m) }
	e.term = newTerm(e.cfg)
	e.cfg.Fence.begin(e.term)
	elCfg := e.cfg
	elCfg.Lock = &recordingLock{Interface: e.cfg.Lock, term: e.term}
	le, err := leaderelection.NewLeaderElector(elCfg.electionConfig(leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) { send(startedLeading{}) },
		OnStoppedLeading: func() {},
		OnNewLeader:      func(id string) { send(NewLeader{Identity: id}) },
	}))
	if err != nil { // validated in NewProps; cannot happen
		panic(err)
	}
	e.le = le
	e.resigning = new(atomic.Bool)
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.FromSlogHandler(e.cfg.Logger.Handler())))
	e.cancel = cancel
	resigning, cfg, turn := e.resigning, e.cfg, e.turn
	go func() {
		select {
		case turn <- struct{}{}:
		case <-runCtx.Done():
			send(electionEnded{})
			return
		}
		cfg.Watchdog.watch(le)
		err := runElection(runCtx, le)
		cfg.Watchdog.unwatch(le)
		if err == nil && resigning.Load() && le.IsLeader() {
			releaseCtx, cancelRelease := context.WithTimeout(context.Background(), cfg.RenewDeadline)
			err = release(releaseCtx, cfg.Lock)
			cancelRelease()
		}
		<-turn
		send(electionEnded{err: err})
	}()
}

// runElection runs le until its election ends; a panic in it (from a lock,
// or re-raised by client-go's crash handler) ends it too.
func runElection(ctx context.Context, le *leaderelection.LeaderElector) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease: leader election panicked: %v\n%s", r, debug.Stack())
		}
	}()
	le.Run(ctx)
	return nil
}

// onRenewalCheck declares the lease lost when the last successful renewal
// is older than client-go's own deadline plus a margin: client-go's renew
// loop is stuck (a lock call that ignores its context), and the lease may
// expire while it waits. The election is cancelled; it ends when the stuck
// call returns.
func (e *elector) onRenewalCheck(ctx actor.Context) {
	e.check = nil
	if !e.leading || e.lost || e.ended || e.resigning.Load() {
		return
	}
	if err := e.le.Check(e.cfg.stallThreshold() - e.cfg.LeaseDuration); err != nil {
		e.lose(ctx, e.cfg.stallReason())
		e.cancel()
		return
	}
	e.armCheck(ctx)
}

// lose tells the parent the lease is lost, once; the fence fails from before.
func (e *elector) lose(ctx actor.Context, why string) {
	if e.lost {
		return
	}
	e.lost = true
	e.term.end(reasonLost)
	e.cfg.Logger.Warn("leader election lost", "lock", e.cfg.Lock.Describe(), "identity", e.cfg.Lock.Identity(), "why", why)
	ctx.Send(ctx.Parent(), Lost{Identity: e.cfg.Lock.Identity(), Reason: why})
}

func (e *elector) armCheck(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	e.check = time.AfterFunc(e.cfg.RetryPeriod/2, func() { system.Root.Send(self, renewalCheck{}) })
}

func (e *elector) stopCheck() {
	if e.check != nil {
		e.check.Stop()
		e.check = nil
	}
}

// logHolder says at Info, once per change of holder (client-go reports a
// holder only when it differs from the last one it reported), whom a
// standby is waiting for: client-go's own "failed to acquire lease" is
// logged at verbosity 4 only.
func (e *elector) logHolder(holder string) {
	if holder == "" || holder == e.cfg.Lock.Identity() || (e.leading && !e.lost) {
		return
	}
	e.cfg.Logger.Info("waiting for the lease held by "+holder,
		"lock", e.cfg.Lock.Describe(), "identity", e.cfg.Lock.Identity(), "holder", holder)
}
