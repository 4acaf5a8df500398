package main

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// seedController is the seed's Controller, with the bench's own health type.
type seedController interface {
	Run(ctx context.Context) error
	GetHealth() healthStatus
	Shutdown(ctx context.Context)
}

// seedSystem is the seed's way and the floor: an errgroup runs every child's Run and
// waits (RunControllers), health is a loop of GetHealth calls, shutdown a WaitGroup of
// Shutdown calls (ShutdownRunnables). Nothing supervises, so nothing restarts.
type seedSystem struct {
	controllers []seedController
}

var _ healthSweeper = (*seedSystem)(nil)

// Name is the column header.
func (*seedSystem) Name() string { return "seed" }

// Start runs every child's Run in an errgroup and waits for all of them.
func (s *seedSystem) Start(ctx context.Context, children []*child) error {
	s.controllers = make([]seedController, len(children))
	for i, c := range children {
		s.controllers[i] = c
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range s.controllers {
		g.Go(func() error { return c.Run(gctx) })
	}
	return g.Wait()
}

// HealthSweep calls every child's GetHealth in turn.
func (s *seedSystem) HealthSweep(context.Context) (int, error) {
	statuses := make([]healthStatus, 0, len(s.controllers))
	for _, c := range s.controllers {
		statuses = append(statuses, c.GetHealth())
	}
	return countHealthy(statuses), nil
}

// Shutdown calls every child's Shutdown in parallel and waits for all of them or ctx.
func (s *seedSystem) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, c := range s.controllers {
		wg.Go(func() { c.Shutdown(ctx) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
}

// countHealthy counts the healthy entries.
func countHealthy(statuses []healthStatus) int {
	healthy := 0
	for _, h := range statuses {
		if h.Healthy {
			healthy++
		}
	}
	return healthy
}
