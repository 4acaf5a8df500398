// Package testchild provides controllers, stores, webhooks and runnables for
// tests: each records every call it receives and behaves as its test says,
// including failing, panicking and hanging, so tests can drive the
// supervisor through every path and check its accounting against the
// children's own.
package testchild

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/actorkube/controllermanager/actors"
)

// Behavior is what a child does on each call. A nil field means the call
// succeeds at once (healthy, for health).
type Behavior struct {
	// Run is called with the run number (1 for the first Run).
	Run func(ctx context.Context, n int) error
	// Shutdown is called with the shutdown number.
	Shutdown func(ctx context.Context, n int)
	// Health returns the health answer.
	Health func() (healthy bool, message string)
}

// Interval is one incarnation's time between Run returning nil and its
// Shutdown being called.
type Interval struct {
	Start, End time.Time // End is zero while it runs
}

// Controller is an actors.Controller (and actors.Namer) for tests.
type Controller struct {
	name string

	mu        sync.Mutex
	behavior  Behavior
	runs      int
	shutdowns int
	health    int
	active    []Interval
	report    func(error)
	changed   chan struct{}
}

// NewController returns a controller named name.
func NewController(name string, b Behavior) *Controller {
	return &Controller{name: name, behavior: b, changed: make(chan struct{})}
}

// Name returns the controller's name.
func (c *Controller) Name() string { return c.name }

// Set replaces the controller's behaviour for the calls that follow.
func (c *Controller) Set(b Behavior) {
	c.mu.Lock()
	c.behavior = b
	c.mu.Unlock()
}

// Run records the call and runs the behaviour.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runs++
	n, fn := c.runs, c.behavior.Run
	c.report, _ = actors.FailureReporter(ctx)
	c.notify()
	c.mu.Unlock()
	var err error
	if fn != nil {
		err = fn(ctx, n)
	}
	if err == nil {
		c.mu.Lock()
		c.active = append(c.active, Interval{Start: time.Now()})
		c.notify()
		c.mu.Unlock()
	}
	return err
}

// Shutdown records the call and runs the behaviour.
func (c *Controller) Shutdown(ctx context.Context) {
	c.mu.Lock()
	c.shutdowns++
	n, fn := c.shutdowns, c.behavior.Shutdown
	if k := len(c.active); k > 0 && c.active[k-1].End.IsZero() {
		c.active[k-1].End = time.Now()
	}
	c.notify()
	c.mu.Unlock()
	if fn != nil {
		fn(ctx, n)
	}
}

// GetHealth records the call and returns the behaviour's answer.
func (c *Controller) GetHealth() actors.HealthStatus {
	c.mu.Lock()
	c.health++
	fn := c.behavior.Health
	c.mu.Unlock()
	if fn == nil {
		return actors.HealthStatus{Name: c.name, Healthy: true}
	}
	ok, msg := fn()
	return actors.HealthStatus{Name: c.name, Healthy: ok, Message: msg}
}

// Fail reports err as a failure of the controller's background work, with
// the reporter of its last Run.
func (c *Controller) Fail(err error) {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	if report == nil {
		panic(fmt.Sprintf("testchild: %s has not run", c.name))
	}
	report(err)
}

// Counts returns how many times Run, Shutdown and GetHealth were called.
func (c *Controller) Counts() (runs, shutdowns, health int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.shutdowns, c.health
}

// Active returns the controller's active intervals.
func (c *Controller) Active() []Interval {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Interval(nil), c.active...)
}

// Changed returns a channel closed at the controller's next call.
func (c *Controller) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Controller) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Store is an actors.Store (and Runnable) for tests.
type Store struct {
	name      string
	mu        sync.Mutex
	recover   func(ctx context.Context, n int) error
	recovers  int
	shutdowns int
}

// NewStore returns a store named name whose Recover runs fn (nil: succeeds).
func NewStore(name string, fn func(ctx context.Context, n int) error) *Store {
	return &Store{name: name, recover: fn}
}

// Name returns the store's name.
func (s *Store) Name() string { return s.name }

// Recover records the call and runs the behaviour.
func (s *Store) Recover(ctx context.Context) error {
	s.mu.Lock()
	s.recovers++
	n, fn := s.recovers, s.recover
	s.mu.Unlock()
	if fn != nil {
		return fn(ctx, n)
	}
	return nil
}

// Shutdown records the call.
func (s *Store) Shutdown(context.Context) {
	s.mu.Lock()
	s.shutdowns++
	s.mu.Unlock()
}

// Counts returns how many times Recover and Shutdown were called.
func (s *Store) Counts() (recovers, shutdowns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovers, s.shutdowns
}

// Runnable is a plain actors.Runnable for tests.
type Runnable struct {
	mu        sync.Mutex
	shutdowns int
	shutdown  func(ctx context.Context)
}

// NewRunnable returns a runnable whose Shutdown runs fn (nil: returns).
func NewRunnable(fn func(ctx context.Context)) *Runnable { return &Runnable{shutdown: fn} }

// Shutdown records the call and runs the behaviour.
func (r *Runnable) Shutdown(ctx context.Context) {
	r.mu.Lock()
	r.shutdowns++
	fn := r.shutdown
	r.mu.Unlock()
	if fn != nil {
		fn(ctx)
	}
}

// Shutdowns returns how many times Shutdown was called.
func (r *Runnable) Shutdowns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shutdowns
}

// Webhook is an actors.Webhook for tests.
type Webhook struct {
	name, path string
	mu         sync.Mutex
	start      func(ctx context.Context, n int) error
	handle     func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)
	ready      bool
	starts     int
	shutdowns  int
	handled    int
}

// NewWebhook returns a webhook named name served at path, ready once started.
func NewWebhook(name, path string, start func(ctx context.Context, n int) error,
	handle func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)) *Webhook {
	return &Webhook{name: name, path: path, start: start, handle: handle}
}

// Name returns the webhook's name.
func (w *Webhook) Name() string { return w.name }

// Path returns where the webhook is served.
func (w *Webhook) Path() string { return w.path }

// Start records the call, runs the behaviour and, on success, becomes ready.
func (w *Webhook) Start(ctx context.Context) error {
	w.mu.Lock()
	w.starts++
	n, fn := w.starts, w.start
	w.mu.Unlock()
	var err error
	if fn != nil {
		err = fn(ctx, n)
	}
	w.mu.Lock()
	w.ready = err == nil
	w.mu.Unlock()
	return err
}

// Ready reports whether the last Start succeeded and Shutdown has not run since.
func (w *Webhook) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready
}

// Shutdown records the call; the webhook is no longer ready.
func (w *Webhook) Shutdown(context.Context) {
	w.mu.Lock()
	w.shutdowns++
	w.ready = false
	w.mu.Unlock()
}

// Handle records the call and runs the behaviour (nil: allow).
func (w *Webhook) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	w.mu.Lock()
	w.handled++
	fn := w.handle
	w.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}

// Counts returns how many times Start, Shutdown and Handle were called.
func (w *Webhook) Counts() (starts, shutdowns, handled int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts, w.shutdowns, w.handled
}

// Block returns a Run (or Start, or Recover) behaviour that blocks until
// release is closed (then succeeds) or ctx ends (then returns its error).
func Block(release <-chan struct{}) func(ctx context.Context, n int) error {
	return func(ctx context.Context, _ int) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Eventually polls cond every few milliseconds until it holds or timeout
// passes, and reports whether it held. Tests use it instead of sleeping.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}
