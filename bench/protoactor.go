package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// protoactorHealthTimeout bounds one health request.
const protoactorHealthTimeout = 10 * time.Second

// protoactorSystem is github.com/asynkron/protoactor-go used directly and plainly:
// one top-level actor per child, health by a RequestFuture to each (all sent, then all
// awaited), shutdown by a StopFuture to each, then waiting on every future. A child
// fails by panicking in Receive; top-level actors are restarted by protoactor's default
// supervisor strategy (one-for-one, no backoff, up to 10 restarts in 10s per child,
// more than the harness asks of one child).
type protoactorSystem struct {
	system *actor.ActorSystem
	pids   []*actor.PID
}

var (
	_ healthSweeper = (*protoactorSystem)(nil)
	_ restarter     = (*protoactorSystem)(nil)
)

// healthQuery asks a child actor for its health; it responds with a healthStatus.
type healthQuery struct{}

// failNow makes a child actor panic, which its supervisor sees as a failure.
type failNow struct{}

// childActor hosts one child: Started runs it, Restarting and Stopping shut it down.
type childActor struct{ child *child }

// Receive handles lifecycle messages, health queries and injected failures.
func (a *childActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		if err := a.child.Run(context.Background()); err != nil {
			panic(err)
		}
	case *actor.Restarting, *actor.Stopping:
		a.child.Shutdown(context.Background())
	case healthQuery:
		ctx.Respond(a.child.GetHealth())
	case failNow:
		panic(errChildFailed)
	}
}

// discardLogger silences protoactor, whose default logger writes coloured text to stderr.
func discardLogger(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }

// Name is the column header.
func (*protoactorSystem) Name() string { return "protoactor" }

// Start creates an actor system and spawns one actor per child.
func (s *protoactorSystem) Start(_ context.Context, children []*child) error {
	s.system = actor.NewActorSystem(actor.WithLoggerFactory(discardLogger))
	s.pids = make([]*actor.PID, 0, len(children))
	for _, c := range children {
		props := actor.PropsFromProducer(func() actor.Actor { return &childActor{child: c} })
		pid, err := s.system.Root.SpawnNamed(props, c.name)
		if err != nil {
			return fmt.Errorf("spawn %s: %w", c.name, err)
		}
		s.pids = append(s.pids, pid)
	}
	return nil
}

// HealthSweep sends every child a health request, then awaits every answer.
func (s *protoactorSystem) HealthSweep(context.Context) (int, error) {
	futures := make([]*actor.Future, len(s.pids))
	for i, pid := range s.pids {
		futures[i] = s.system.Root.RequestFuture(pid, healthQuery{}, protoactorHealthTimeout)
	}
	statuses := make([]healthStatus, 0, len(futures))
	for i, f := range futures {
		res, err := f.Result()
		if err != nil {
			return 0, fmt.Errorf("health of %s: %w", s.pids[i].Id, err)
		}
		h, ok := res.(healthStatus)
		if !ok {
			return 0, fmt.Errorf("health of %s: unexpected %T", s.pids[i].Id, res)
		}
		statuses = append(statuses, h)
	}
	return countHealthy(statuses), nil
}

// Fail makes child i panic.
func (s *protoactorSystem) Fail(_ context.Context, i int) error {
	s.system.Root.Send(s.pids[i], failNow{})
	return nil
}

// Shutdown stops every actor, waits for each, then shuts the actor system down
// (which stops nothing by itself).
func (s *protoactorSystem) Shutdown(context.Context) error {
	if s.system == nil {
		return nil
	}
	futures := make([]*actor.Future, len(s.pids))
	for i, pid := range s.pids {
		futures[i] = s.system.Root.StopFuture(pid)
	}
	var errs []error
	for i, f := range futures {
		if err := f.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", s.pids[i].Id, err))
		}
	}
	s.system.Shutdown()
	return errors.Join(errs...)
}
