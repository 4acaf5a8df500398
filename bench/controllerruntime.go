package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func init() {
	// Without a logger controller-runtime prints a warning with a stack trace once
	// anything logs, and 30s after start.
	ctrllog.SetLogger(logr.Discard())
}

// unreachableAPIServer is the dummy rest.Config the manager demands. Nothing in a
// manager without caches, informers, leader election or webhooks contacts it (the
// tests check this against a server that counts requests); port 1 refuses any
// connection, so a contact would fail loudly rather than hang.
var unreachableAPIServer = &rest.Config{Host: "https://127.0.0.1:1"}

// errUnhealthy is what a healthz check returns for an unhealthy child.
var errUnhealthy = errors.New("bench: child unhealthy")

// controllerRuntimeSystem is sigs.k8s.io/controller-runtime's manager with one
// Runnable per child and no cluster use: no leader election, no metrics or probe
// server. A Runnable must block until its context ends, so each child costs a
// goroutine. Health is the manager's healthz aggregation (one check per child, added
// with AddHealthzCheck), served in process by the same healthz.Handler the manager
// mounts at /healthz: the lower bound of a probe, without the network. Nothing
// restarts a runnable that fails: the manager stops.
type controllerRuntimeSystem struct {
	config  *rest.Config // nil means unreachableAPIServer
	healthz *healthz.Handler
	cancel  context.CancelFunc
	stopped chan error
}

var _ healthSweeper = (*controllerRuntimeSystem)(nil)

// Name is the column header.
func (*controllerRuntimeSystem) Name() string { return "controller-runtime" }

// Start builds a manager, adds a Runnable and a healthz check per child, and starts
// the manager in the background.
func (s *controllerRuntimeSystem) Start(ctx context.Context, children []*child) error {
	config := s.config
	if config == nil {
		config = unreachableAPIServer
	}
	mgr, err := manager.New(config, manager.Options{
		Logger:                 logr.Discard(),
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	checks := make(map[string]healthz.Checker, len(children))
	for _, c := range children {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			if err := c.Run(ctx); err != nil {
				return err
			}
			<-ctx.Done()
			c.Shutdown(context.WithoutCancel(ctx))
			return nil
		})); err != nil {
			return fmt.Errorf("add %s: %w", c.name, err)
		}
		check := func(*http.Request) error {
			if !c.GetHealth().Healthy {
				return errUnhealthy
			}
			return nil
		}
		if err := mgr.AddHealthzCheck(c.name, check); err != nil {
			return fmt.Errorf("add healthz check %s: %w", c.name, err)
		}
		checks[c.name] = check
	}
	s.healthz = &healthz.Handler{Checks: checks}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.stopped = make(chan error, 1)
	go func() { s.stopped <- mgr.Start(runCtx) }()
	return nil
}

// HealthSweep asks the manager's healthz handler, which runs every check.
func (s *controllerRuntimeSystem) HealthSweep(context.Context) (int, error) {
	rec := httptest.NewRecorder()
	s.healthz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		return 0, fmt.Errorf("healthz: %d %s", rec.Code, rec.Body)
	}
	return len(s.healthz.Checks), nil
}

// Shutdown cancels the manager's context and waits for Start to return.
func (s *controllerRuntimeSystem) Shutdown(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	select {
	case err := <-s.stopped:
		if err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
}
