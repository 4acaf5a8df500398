package lease

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Config configures an elector.
type Config struct {
	Lock          resourcelock.Interface
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Logger receives client-go's leader-election logs (through the context,
	// leaving the process-wide klog alone).
	Logger *slog.Logger
}

// elector is the actor that runs one LeaderElector.
type elector struct {
	cfg      Config
	le       *leaderelection.LeaderElector
	cancel   context.CancelFunc
	leading  bool
	resigned bool
}

// The elector's own messages, sent by client-go's callbacks and by the
// goroutine running the election.
type (
	startedLeading struct{}
	runReturned    struct{}
)

// NewProps returns the Props of an elector actor, or an error when cfg is
// not one client-go accepts.
func NewProps(cfg Config) (*actor.Props, error) {
	if cfg.Lock == nil {
		return nil, fmt.Errorf("lease: no lock")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// Validate now, with no-op callbacks, so that a bad config fails in the
	// manager's constructor rather than at Start.
	if _, err := leaderelection.NewLeaderElector(cfg.electionConfig(leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {},
	})); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return actor.PropsFromProducer(func() actor.Actor { return &elector{cfg: cfg} }), nil
}

func (c Config) electionConfig(cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock:            c.Lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		Callbacks:       cb,
		ReleaseOnCancel: true,
		Name:            c.Lock.Describe(),
	}
}

// Receive handles one message; the election itself runs in a goroutine.
func (e *elector) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		e.run(ctx)
	case startedLeading:
		e.leading = true
		ctx.Send(ctx.Parent(), Elected{Identity: e.cfg.Lock.Identity()})
	case NewLeader:
		ctx.Send(ctx.Parent(), m)
	case Resign:
		e.resigned = true
		e.cancel()
	case runReturned:
		switch {
		case e.resigned:
			ctx.Send(ctx.Parent(), Released{})
		case e.leading:
			ctx.Send(ctx.Parent(), Lost{Identity: e.cfg.Lock.Identity()})
		}
		e.leading = false
	case *actor.Stopping:
		if e.cancel != nil {
			e.cancel()
		}
	}
}

func (e *elector) run(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	send := func(m any) { system.Root.Send(self, m) }
	le, err := leaderelection.NewLeaderElector(e.cfg.electionConfig(leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) { send(startedLeading{}) },
		OnStoppedLeading: func() {},
		OnNewLeader:      func(id string) { send(NewLeader{Identity: id}) },
	}))
	if err != nil { // validated in NewProps; cannot happen
		panic(err)
	}
	e.le = le
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.FromSlogHandler(e.cfg.Logger.Handler())))
	e.cancel = cancel
	go func() {
		le.Run(runCtx)
		send(runReturned{})
	}()
}
