package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
)

// phase is where a child is by its own records.
type phase uint8

const (
	idle        phase = iota // never started, or its last Shutdown returned
	starting                 // its start call runs
	running                  // its start call returned nil
	startFailed              // its start call failed; its Shutdown is owed
	stopping                 // its Shutdown runs
)

// shutdownMode is how the next Shutdown behaves.
type shutdownMode uint8

const (
	shutdownNormal shutdownMode = iota
	shutdownSlow                // returns after a while, or when its context ends
	shutdownHung                // ignores its context; returns after a while, or once the chaos ends
	shutdownPanic               // panics
	shutdownHeld                // ignores its context; returns on Harness.Release
)

// child is what every chaos child shares: its behaviour, the faults waiting
// to strike it, and its own records.
type child struct {
	h    *Harness
	name string
	kind actors.Kind
	path string // webhooks

	mu             sync.Mutex
	phase          phase
	starts         int // start calls (its incarnations)
	startsBusy     int // start calls that have not returned
	shutdowns      int
	report         func(error) // the running incarnation's failure reporter
	lastFault      time.Time
	startFault     FaultKind // FaultStartError or FaultStartPanic, for the next start call
	shutdown       shutdownMode
	shutdownFor    time.Duration
	healthPanic    bool
	unhealthyUntil time.Time
	unhealthySeq   uint64
	hangUntil      time.Time
	handlePanic    bool
	handleErrors   int
	handleSlow     bool
	handled        int // Handle calls
	everFaulted    [numFaultKinds]bool
	reckless       bool // fails as soon as it has started, every time (Harness.Escalate)

	// Guarded by h.mu: the checker's tally of the child's events.
	tally tally
}

// Controller is a chaos controller.
type Controller struct{ *child }

// Name returns the controller's name (so that the manager does not ask
// GetHealth for it).
func (c Controller) Name() string { return c.name }

// Run starts an incarnation.
func (c Controller) Run(ctx context.Context) error { return c.start(ctx) }

// Shutdown ends the incarnation.
func (c Controller) Shutdown(ctx context.Context) { c.stop(ctx) }

// GetHealth answers the liveness probe.
func (c Controller) GetHealth() cm.HealthStatus {
	ok, msg := c.health()
	return cm.HealthStatus{Name: c.name, Healthy: ok, Message: msg}
}

// Store is a chaos store.
type Store struct{ *child }

// Name returns the store's name.
func (s Store) Name() string { return s.name }

// Recover starts an incarnation.
func (s Store) Recover(ctx context.Context) error { return s.start(ctx) }

// Shutdown ends the incarnation.
func (s Store) Shutdown(ctx context.Context) { s.stop(ctx) }

// Webhook is a chaos webhook.
type Webhook struct{ *child }

// Name returns the webhook's name.
func (w Webhook) Name() string { return w.name }

// Path returns where the webhook is served.
func (w Webhook) Path() string { return w.path }

// Start starts an incarnation.
func (w Webhook) Start(ctx context.Context) error { return w.start(ctx) }

// Shutdown ends the incarnation.
func (w Webhook) Shutdown(ctx context.Context) { w.stop(ctx) }

// Ready answers the liveness probe and the admission handler.
func (w Webhook) Ready() bool { ok, _ := w.health(); return ok }

// Handle answers an admission request.
func (w Webhook) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return w.handle(ctx, req)
}

var (
	_ cm.Controller = Controller{}
	_ cm.Store      = Store{}
	_ cm.Runnable   = Store{}
	_ cm.Webhook    = Webhook{}
)

// value is the child as the manager takes it.
func (c *child) value() any {
	switch c.kind {
	case actors.KindController:
		return Controller{c}
	case actors.KindStore:
		return Store{c}
	}
	return Webhook{c}
}

func (c *child) start(ctx context.Context) error {
	c.mu.Lock()
	if c.phase != idle {
		c.h.violate("%s %s: start call %d while its previous incarnation is %s: two incarnations at once", c.kind, c.name, c.starts+1, c.phase)
	}
	if c.startsBusy > 0 {
		c.h.stats.overlappingStarts.Add(1) // the previous start call, stopped while it ran, has not returned yet
	}
	c.starts++
	c.startsBusy++
	n := c.starts
	c.phase = starting
	c.report = nil
	fault := c.startFault
	c.startFault = 0
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.startsBusy--
		c.mu.Unlock()
	}()
	report, _ := cm.FailureReporter(ctx)

	if fault != 0 && !c.h.calm() {
		f := c.h.strike(c, fault, n)
		c.mu.Lock()
		if c.phase == starting && c.starts == n {
			c.phase = startFailed
		}
		c.mu.Unlock()
		if fault == FaultStartPanic {
			panic(f)
		}
		return f
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase == starting && c.starts == n {
		c.phase = running
		c.report = report
		if c.reckless {
			go report(c.h.strike(c, FaultReport, n))
		}
	}
	return nil
}

func (c *child) stop(ctx context.Context) {
	c.mu.Lock()
	switch c.phase {
	case idle, stopping:
		c.h.violate("%s %s: Shutdown while %s (incarnation %d): not one Shutdown per start call", c.kind, c.name, c.phase, c.starts)
	}
	c.phase = stopping
	c.shutdowns++
	c.report = nil
	mode, d := c.shutdown, c.shutdownFor
	c.shutdown = shutdownNormal
	n := c.starts
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.phase = idle
		c.mu.Unlock()
	}()
	if c.h.calm() && mode != shutdownHeld {
		mode = shutdownNormal
	}
	switch mode {
	case shutdownSlow:
		waitFor(ctx.Done(), d)
	case shutdownHung:
		hangInShutdown(c.h.calmed, d)
	case shutdownHeld:
		hangInShutdown(c.h.released, 0)
	case shutdownPanic:
		panic(c.h.strike(c, FaultShutdownPanic, n))
	}
}

// health answers GetHealth (controllers) and Ready (webhooks).
func (c *child) health() (bool, string) {
	c.mu.Lock()
	if c.healthPanic && !c.h.calm() {
		c.healthPanic = false
		n := c.starts
		c.mu.Unlock()
		panic(c.h.strike(c, FaultHealthPanic, n))
	}
	hang, unhealthy, seq := c.hangUntil, c.unhealthyUntil, c.unhealthySeq
	c.mu.Unlock()
	if d := time.Until(hang); d > 0 {
		hangInHealth(c.h.calmed, d)
	}
	if time.Now().Before(unhealthy) && !c.h.calm() {
		return false, fmt.Sprintf("chaos: unhealthy (fault #%d)", seq)
	}
	return true, ""
}

// errHandle is what a Handle made to fail returns.
var errHandle = errors.New("chaos: Handle failed")

func (c *child) handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	c.mu.Lock()
	c.handled++
	n := c.starts
	calm := c.h.calm()
	panicNow := c.handlePanic && !calm
	c.handlePanic = false
	failNow := c.handleErrors > 0 && !calm
	if failNow {
		c.handleErrors--
	}
	slow := c.handleSlow && !calm
	c.handleSlow = false
	c.mu.Unlock()
	switch {
	case panicNow:
		panic(c.h.strike(c, FaultHandlePanic, n))
	case failNow:
		return nil, fmt.Errorf("%w: %w", errHandle, c.h.strike(c, FaultHandleErrors, n))
	case slow:
		// Outlive the request's deadline, whatever the context says.
		<-ctx.Done()
		waitFor(nil, 100*time.Millisecond)
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}

// records returns the child's own counts.
func (c *child) records() (starts, shutdowns, handled int, ph phase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts, c.shutdowns, c.handled, c.phase
}

// hangInShutdown is where a hung Shutdown waits: until release is closed or
// d (if positive) has passed, whatever its context says.
//
//go:noinline
func hangInShutdown(release <-chan struct{}, d time.Duration) { waitFor(release, d) }

// hangInHealth is where a hung health call waits.
//
//go:noinline
func hangInHealth(release <-chan struct{}, d time.Duration) { waitFor(release, d) }

// waitFor waits until done is closed or d (if positive) has passed.
func waitFor(done <-chan struct{}, d time.Duration) {
	if d <= 0 {
		<-done
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (p phase) String() string {
	return [...]string{"idle", "starting", "running", "startFailed", "stopping"}[p]
}
