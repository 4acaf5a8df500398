package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thejerf/suture/v4"
)

// errChildFailed is the failure the harness injects into a supervised child.
var errChildFailed = errors.New("bench: child failed")

// sutureSystem is github.com/thejerf/suture/v4: one supervisor, one Service per
// child. A Service's Serve must block until its context ends, so each child costs a
// goroutine. Suture has no health API. A child fails by returning an error from Serve;
// suture restarts it at once while the supervisor's decaying failure count stays
// under FailureThreshold, which is set out of reach so that no backoff applies.
//
// With a shape, suture's own supervision tree: the root supervisor's children are
// supervisors (a Supervisor is a Service), nested to the shape's depth, each configured
// as the root is; a failed child is restarted by the supervisor it is in.
type sutureSystem struct {
	shape    shape // nil: every child at the root
	services []*sutureService
	root     *suture.Supervisor
	cancel   context.CancelFunc
	stopped  <-chan error
}

var (
	_ restarter   = (*sutureSystem)(nil)
	_ sizedSystem = (*sutureSystem)(nil)
)

// sutureSpec is every supervisor's: events dropped, backoff out of the way.
func sutureSpec() suture.Spec {
	return suture.Spec{
		EventHook:        func(suture.Event) {}, // the default logs every event
		FailureThreshold: 1e12,                  // never back off …
		FailureBackoff:   time.Nanosecond,       // … and were it reached, barely
		BackoffJitter:    suture.NoJitter{},
	}
}

// sutureService hosts one child as a suture Service.
type sutureService struct {
	child *child
	fail  chan error // capacity 1: a failure to return from Serve
}

// Serve runs the child, then waits for the end of its context or an injected failure,
// and shuts the child down either way.
func (s *sutureService) Serve(ctx context.Context) error {
	if err := s.child.Run(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		s.child.Shutdown(context.WithoutCancel(ctx))
		return ctx.Err()
	case err := <-s.fail:
		s.child.Shutdown(ctx)
		return err
	}
}

// String names the service in suture's events.
func (s *sutureService) String() string { return s.child.name }

// sutureName is suture's column header.
const sutureName = "suture"

// Name is the column header: "suture", or "suture-100x100" for a tree.
func (s *sutureSystem) Name() string {
	if s.shape == nil {
		return sutureName
	}
	return treeName(sutureName, s.shape)
}

// Size is the tree's number of children; 0 (any) when flat.
func (s *sutureSystem) Size() int {
	if s.shape == nil {
		return 0
	}
	return s.shape.size()
}

// Start adds a Service per child to a new supervisor (in a tree: to the innermost
// supervisors, added to their parents) and serves it in the background.
func (s *sutureSystem) Start(ctx context.Context, children []*child) error {
	if s.shape != nil && len(children) != s.shape.size() {
		return fmt.Errorf("a tree of %s holds %d children, not %d", s.shape, s.shape.size(), len(children))
	}
	sup := suture.New("bench", sutureSpec())
	s.root = sup
	s.services = make([]*sutureService, len(children))
	members := make([]suture.Service, len(children))
	for i, c := range children {
		s.services[i] = &sutureService{child: c, fail: make(chan error, 1)}
		members[i] = s.services[i]
	}
	if s.shape != nil {
		members = split(s.shape, members, func(i int, members []suture.Service) suture.Service {
			group := suture.New(fmt.Sprintf("g%d", i), sutureSpec())
			for _, m := range members {
				group.Add(m)
			}
			return group
		})
	}
	for _, m := range members {
		sup.Add(m)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.stopped = sup.ServeBackground(runCtx)
	return nil
}

// Fail makes child i's Serve return an error.
func (s *sutureSystem) Fail(_ context.Context, i int) error {
	select {
	case s.services[i].fail <- errChildFailed:
		return nil
	default:
		return fmt.Errorf("%s: a failure is already pending", s.services[i].child.name)
	}
}

// Shutdown cancels the supervisor's context and waits for it to stop.
func (s *sutureSystem) Shutdown(ctx context.Context) error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	select {
	case err := <-s.stopped:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("supervisor: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
}
