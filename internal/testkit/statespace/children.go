package statespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
)

// Knobs is how a child behaves from now on; the zero value is a child that
// starts and stops at once and is healthy.
type Knobs struct {
	// StartDelay is how long its start call takes (a slow setup step).
	StartDelay time.Duration
	// StartIgnoresCtx makes the start call wait out StartDelay whatever its
	// context says, as a setup step that does not look at it.
	StartIgnoresCtx bool
	// StartFails makes the start call return an error; StartPanics panic.
	StartFails, StartPanics bool
	// ShutdownDelay is how long Shutdown takes; it returns early when its
	// context ends unless ShutdownIgnoresCtx.
	ShutdownDelay      time.Duration
	ShutdownIgnoresCtx bool
	// ShutdownHangs makes Shutdown wait, whatever its context says, until the
	// sequence releases every hung call.
	ShutdownHangs bool
	// Unhealthy makes GetHealth (a webhook's Ready) answer unhealthy (not
	// ready); HealthPanics makes it panic.
	Unhealthy, HealthPanics bool
}

// child is what every kind of child of a sequence shares: its journal and
// its knobs.
type child struct {
	name, kind string // name is its path in a tree
	leaf       string // its name within its group: what Name returns
	journal    *Journal
	release    <-chan struct{} // closed when the sequence releases hung calls

	mu     sync.Mutex
	knobs  Knobs
	inc    int
	report func(error)
	guards map[int]func() error // each incarnation's lease guard (controllers and stores)
}

func newChild(name, kind string, j *Journal, release <-chan struct{}) *child {
	return &child{name: name, leaf: leafName(name), kind: kind, journal: j, release: release}
}

// Name returns the child's name (within its group: "/" is not allowed in
// one).
func (c *child) Name() string { return c.leaf }

func (c *child) set(fn func(*Knobs)) {
	c.mu.Lock()
	fn(&c.knobs)
	c.mu.Unlock()
}

// fail reports a failure of the current incarnation through its
// FailureReporter; it reports whether there was one.
func (c *child) fail(err error) bool {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	if report == nil {
		return false
	}
	report(err)
	return true
}

// wait waits for d, or for ctx unless ignoreCtx, or for the release.
func (c *child) wait(ctx context.Context, d time.Duration, ignoreCtx bool) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	done := ctx.Done()
	if ignoreCtx {
		done = nil
	}
	select {
	case <-timer.C:
		return nil
	case <-c.release:
		return nil
	case <-done:
		return ctx.Err()
	}
}

var errStart = errors.New("statespace: start call fails")

func (c *child) startCall(ctx context.Context) error { return c.startCallThen(ctx, nil) }

// startCallThen is the start call, journalled and behaving as the knobs
// say, then, if the knobs let it succeed, what then does (a member
// store's sync: memberStore).
func (c *child) startCallThen(ctx context.Context, then func() error) (err error) {
	c.mu.Lock()
	c.inc++
	inc, k := c.inc, c.knobs
	c.report, _ = cm.FailureReporter(ctx)
	if guard, ok := cm.LeaseGuard(ctx); ok {
		if c.guards == nil {
			c.guards = map[int]func() error{}
		}
		c.guards[inc] = guard
	}
	c.mu.Unlock()
	c.journal.add(c.name, c.kind, StartEnter, inc, nil)
	defer func() { c.journal.add(c.name, c.kind, StartExit, inc, err) }()
	if err := c.wait(ctx, k.StartDelay, k.StartIgnoresCtx); err != nil {
		return err
	}
	switch {
	case k.StartPanics:
		err = errors.New("panicked")
		panic(fmt.Sprintf("statespace: %s's start call %d panics", c.name, inc))
	case k.StartFails:
		return fmt.Errorf("%s incarnation %d: %w", c.name, inc, errStart)
	}
	if then != nil {
		return then()
	}
	return nil
}

// Shutdown records the call and behaves as the knobs say.
func (c *child) Shutdown(ctx context.Context) {
	c.mu.Lock()
	inc, k := c.inc, c.knobs
	c.mu.Unlock()
	c.journal.add(c.name, c.kind, ShutdownEnter, inc, nil)
	defer c.journal.add(c.name, c.kind, ShutdownExit, inc, nil)
	if k.ShutdownHangs {
		<-c.release
		return
	}
	_ = c.wait(ctx, k.ShutdownDelay, k.ShutdownIgnoresCtx)
}

// probe records a health probe and returns the answer.
func (c *child) probe() bool {
	c.mu.Lock()
	k := c.knobs
	c.mu.Unlock()
	if k.HealthPanics {
		panic(fmt.Sprintf("statespace: %s's health panics", c.name))
	}
	return !k.Unhealthy
}

// Controller is a journaling cm.Controller.
type Controller struct{ *child }

// Run is the controller's start call.
func (c Controller) Run(ctx context.Context) error { return c.startCall(ctx) }

// GetHealth answers as the knobs say.
func (c Controller) GetHealth() cm.HealthStatus {
	ok := c.probe()
	msg := ""
	if !ok {
		msg = "statespace: unhealthy"
	}
	return cm.HealthStatus{Name: c.leaf, Healthy: ok, Message: msg}
}

// Store is a journaling cm.Store (and Runnable).
type Store struct{ *child }

// Recover is the store's start call.
func (s Store) Recover(ctx context.Context) error { return s.startCall(ctx) }

// Webhook is a journaling cm.Webhook.
type Webhook struct{ *child }

// Start is the webhook's start call.
func (w Webhook) Start(ctx context.Context) error { return w.startCall(ctx) }

// Ready answers as the knobs say.
func (w Webhook) Ready() bool { return w.probe() }

// Path is where the webhook is served.
func (w Webhook) Path() string { return "/" + w.name }

// Handle allows every request, journalled (HandleOutside,
// HandleBesideShutdown).
func (w Webhook) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	id := w.journal.handleEnter(w.name, w.kind)
	defer w.journal.handleExit(w.name, id)
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}

var (
	_ cm.Controller = Controller{}
	_ cm.Store      = Store{}
	_ cm.Runnable   = Store{}
	_ cm.Webhook    = Webhook{}
)

// incGuards returns the lease guards of the child's incarnations so far.
func (c *child) incGuards() map[int]func() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]func() error, len(c.guards))
	for inc, g := range c.guards {
		out[inc] = g
	}
	return out
}
