package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controllermanager "github.com/actorkube/controllermanager"
)

// oursSystem is controllermanager's ControllerManager with one Controller per child,
// no leader election, supervision with backoff and budget out of the way (see
// oursSupervision), and a logger that discards, as every peer's does.
//
// Health is the manager's GetHealth, which queries every child's actor. A child fails
// the way a controller's background work fails: through the function
// controllermanager.FailureReporter returned from the context its Run received; the
// supervisor shuts it down and runs it again.
//
// With a shape, the children are the leaves of a supervision tree of groups
// (controllermanager.NewGroup) of that shape, each group's SupervisionSpec zero so that
// it inherits oursSupervision; a failed child is restarted by its own group.
type oursSystem struct {
	shape       shape // nil: every child at the root
	mgr         *controllermanager.ControllerManager
	controllers []*oursController
}

var (
	_ healthSweeper = (*oursSystem)(nil)
	_ restarter     = (*oursSystem)(nil)
	_ sizedSystem   = (*oursSystem)(nil)
)

// oursSupervision takes backoff and the restart budget out of the restart latency, as
// the suture and protoactor peers are configured: a nanosecond of backoff (zero means
// the default), a budget out of reach, and a window that forgets each restart at once.
var oursSupervision = controllermanager.SupervisionSpec{
	InitialBackoff: metav1.Duration{Duration: time.Nanosecond},
	MaxBackoff:     metav1.Duration{Duration: time.Nanosecond},
	MaxRestarts:    math.MaxInt32,
	RestartWindow:  metav1.Duration{Duration: time.Nanosecond},
}

// errReportedFailure is the failure the harness reports for a child of ours.
var errReportedFailure = errors.New("bench: background work failed")

// oursController hosts one child as a controllermanager.Controller, and keeps the
// failure reporter of its latest Run.
type oursController struct {
	*child
	report atomic.Pointer[func(error)]
}

var _ controllermanager.Controller = (*oursController)(nil)

// Run keeps the failure reporter of this incarnation, then runs the child. The
// reporter is stored first, so that once the harness sees the child run, Fail
// reports a failure of the incarnation that is running.
func (c *oursController) Run(ctx context.Context) error {
	report, ok := controllermanager.FailureReporter(ctx)
	if !ok {
		return errors.New("bench: Run's context carries no failure reporter")
	}
	c.report.Store(&report)
	return c.child.Run(ctx)
}

// GetHealth converts the child's health to the library's type.
func (c *oursController) GetHealth() controllermanager.HealthStatus {
	h := c.child.GetHealth()
	return controllermanager.HealthStatus{Name: h.Name, Healthy: h.Healthy, Message: h.Message}
}

// Name is the column header: "ours", or "ours-100x100" for a tree.
func (s *oursSystem) Name() string {
	if s.shape == nil {
		return oursName
	}
	return treeName(oursName, s.shape)
}

// Size is the tree's number of children; 0 (any) when flat.
func (s *oursSystem) Size() int {
	if s.shape == nil {
		return 0
	}
	return s.shape.size()
}

// Start builds a manager, adds every child (in a tree: the root's groups) and starts
// it; Start returns once every controller has run.
func (s *oursSystem) Start(ctx context.Context, children []*child) error {
	supervision := oursSupervision
	mgr, err := controllermanager.NewControllerManager(
		controllermanager.NewContext(nil),
		controllermanager.ControllerManagerConfigSpec{Supervision: &supervision},
		"bench",
		controllermanager.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	s.mgr = mgr
	s.controllers = make([]*oursController, len(children))
	runnables := make([]controllermanager.Runnable, len(children))
	for i, c := range children {
		s.controllers[i] = &oursController{child: c}
		runnables[i] = s.controllers[i]
	}
	if s.shape != nil {
		if len(children) != s.shape.size() {
			return fmt.Errorf("a tree of %s holds %d children, not %d", s.shape, s.shape.size(), len(children))
		}
		runnables = split(s.shape, runnables, func(i int, members []controllermanager.Runnable) controllermanager.Runnable {
			return controllermanager.NewGroup(fmt.Sprintf("g%d", i), controllermanager.SupervisionSpec{}, members...)
		})
	}
	mgr.Add(runnables...)
	return mgr.Start(ctx, 0)
}

// HealthSweep asks the manager, which queries every child actor. A tree's
// GetHealth ends with one line per group, after the controllers': those
// are not children of the workload, and are left out of the count.
func (s *oursSystem) HealthSweep(context.Context) (int, error) {
	healthy := 0
	all := s.mgr.GetHealth()
	for _, h := range all[:min(len(all), len(s.controllers))] {
		if h.Healthy {
			healthy++
		}
	}
	return healthy, nil
}

// Fail reports a failure of child i's running incarnation.
func (s *oursSystem) Fail(_ context.Context, i int) error {
	report := s.controllers[i].report.Load()
	if report == nil {
		return fmt.Errorf("%s has not run", s.controllers[i].name)
	}
	(*report)(errReportedFailure)
	return nil
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
