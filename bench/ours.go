//go:build ours

// This file needs the library, which is written against DESIGN.md; it builds only with
// -tags ours until the library compiles, so that the peers run without it.

package main

import (
	"context"
	"fmt"

	controllermanager "github.com/actorkube/controllermanager"
)

func init() { newOurs = func() system { return &oursSystem{} } }

// oursSystem is controllermanager's ControllerManager with one Controller per child,
// no leader election and the default supervision. Restart latency is not measured
// yet: it will fail a child through the supervisor with zero backoff.
type oursSystem struct {
	mgr *controllermanager.ControllerManager
}

var _ healthSweeper = (*oursSystem)(nil)

// oursController hosts one child as a controllermanager.Controller.
type oursController struct{ *child }

// GetHealth converts the child's health to the library's type.
func (c oursController) GetHealth() controllermanager.HealthStatus {
	h := c.child.GetHealth()
	return controllermanager.HealthStatus{Name: h.Name, Healthy: h.Healthy, Message: h.Message}
}

var _ controllermanager.Controller = oursController{}

// Name is the column header.
func (*oursSystem) Name() string { return "ours" }

// Start builds a manager, adds every child and starts it; Start returns once every
// controller has run.
func (s *oursSystem) Start(ctx context.Context, children []*child) error {
	mgr, err := controllermanager.NewControllerManager(
		controllermanager.NewContext(nil), controllermanager.ControllerManagerConfigSpec{}, "bench")
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	s.mgr = mgr
	for _, c := range children {
		mgr.Add(oursController{c})
	}
	return mgr.Start(ctx, 0)
}

// HealthSweep asks the manager, which queries every child actor.
func (s *oursSystem) HealthSweep(context.Context) (int, error) {
	healthy := 0
	for _, h := range s.mgr.GetHealth() {
		if h.Healthy {
			healthy++
		}
	}
	return healthy, nil
}

// Shutdown shuts every controller down and waits until the manager has stopped.
func (s *oursSystem) Shutdown(ctx context.Context) error {
	if s.mgr == nil {
		return nil
	}
	s.mgr.ShutdownAndWait(ctx)
	select {
	case <-s.mgr.Done():
		// Err is nil after a requested shutdown, by contract.
		if err := s.mgr.Err(); err != nil {
			return fmt.Errorf("manager stopped with: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: manager not stopped: %w", ctx.Err())
	}
}
