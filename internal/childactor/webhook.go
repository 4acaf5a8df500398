package childactor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/actors"
	admissionv1 "k8s.io/api/admission/v1"
)

// AdmissionCall is sent to a webhook's child actor, by an admission handler,
// to run the webhook's Handle for one request. The actor never runs Handle in
// its Receive: it starts a goroutine of the child's own for the call (under
// recover) and goes on with its mailbox, so requests run concurrently and a
// slow Handle delays nothing else. The goroutine sends the AdmissionResult to
// Reply directly, without a mailbox hop back, as health answers go to their
// collector.
//
// Every AdmissionCall is answered exactly once: with a refusal, sent from
// Receive, when Handle cannot run now (see AdmissionResult.Refused); else with
// the outcome of Ready and Handle.
type AdmissionCall struct {
	// Ctx is the request's context, passed to Handle. Its deadline is the
	// request's: the caller stops waiting for the answer then, and Handle
	// still running at that point is counted as a failed call.
	Ctx     context.Context
	Request *admissionv1.AdmissionRequest
	Policy  AdmissionPolicy
	// Reply receives the result. It must be buffered (capacity 1 is
	// enough): the child never blocks on it, and drops a result Reply has
	// no room for.
	Reply chan<- AdmissionResult
	// Abandonments, when not nil, is told when the call's Handle is counted
	// abandoned (it still runs abandonGrace after the request ended) and,
	// after that, when it returns; an admission handler counts them in its
	// metrics. Its methods run on the call's goroutines and must not block.
	Abandonments AbandonedCalls

	// claim: 1 once the child has taken the call (it will answer), 2 once
	// the caller has abandoned it (the child must not run it).
	claim atomic.Int32
}

// Abandon gives the call up before its child has taken it: true if the
// child never will (nothing runs, nothing answers); false if it has
// taken it already, and will answer.
func (m *AdmissionCall) Abandon() bool { return m.claim.CompareAndSwap(0, 2) }

// take is the child taking the call; false if its caller abandoned it.
func (m *AdmissionCall) take() bool { return m.claim.CompareAndSwap(0, 1) }

// AbandonedCalls is told of the Handle calls that outlive their request
// (see AdmissionCall.Abandonments): Abandoned once a call counts as abandoned,
// then Returned once its Handle returns, if it ever does. A call that
// returns within abandonGrace of its request's end is never reported.
type AbandonedCalls interface {
	// Abandoned reports a Handle still running abandonGrace after its
	// request ended.
	Abandoned()
	// Returned reports that a Handle reported to Abandoned has returned.
	Returned()
}

// AdmissionPolicy is how a webhook's child serves an AdmissionCall. Admission
// handlers fill it in from their configuration; its zero value means no
// bound on requests in flight, no wait for Ready (a Ready that does not
// answer at once refuses the call), and errors that never fail the webhook.
type AdmissionPolicy struct {
	// MaxInFlight > 0 bounds the Handle calls of the webhook's incarnation
	// running at once (those that outlived their request included; once
	// such calls hold them all, the incarnation fails with
	// ErrHandlesAbandoned): a call past it is
	// refused with ErrTooManyRequests.
	MaxInFlight int
	// ReadyTimeout is how long a call waits for the webhook's Ready before
	// it is refused with ErrWebhookNotReady.
	ReadyTimeout time.Duration
	// FailureThreshold > 0 is how many failed Handle calls in a row (an
	// error, no response, or still running at the request's deadline) fail
	// the webhook's incarnation, so that its supervisor restarts it. A panic
	// fails it at once, whatever the threshold.
	FailureThreshold int
}

// AdmissionResult answers an AdmissionCall.
type AdmissionResult struct {
	// Refused, when set, says why Handle did not run; it wraps
	// ErrWebhookUnavailable, ErrWebhookNotReady or ErrTooManyRequests.
	Refused error
	// Response is Handle's answer when Refused and Err are nil. It is the
	// webhook's own value: copy it before changing it.
	Response *admissionv1.AdmissionResponse
	// Err is Handle's failure: a *CallError (it returned an error, or
	// neither a response nor an error: ErrNoResponse) or a *PanicError.
	Err error
}

// admissionState is a webhook child's bookkeeping of its admission requests.
type admissionState struct {
	ready readyGate

	// Owned by Receive: the bookkeeping of the current incarnation.
	gen  uint64
	runs *admissionRuns
}

// admissionRuns is one incarnation's bookkeeping of its Handle calls. Each
// incarnation has its own, so that a restart gives the webhook a fresh
// MaxInFlight budget: the calls of the incarnation before, which may still
// run (a Handle that ignores its context outlives its request), no longer
// count against it.
type admissionRuns struct {
	// inFlight counts the incarnation's Handle calls running (those that
	// outlived their request included): only Receive adds.
	inFlight atomic.Int64
	// abandoned counts those of them that outlived their request; once
	// they hold every slot the incarnation fails (wedged, once), for no
	// request could be served by it again until they return.
	abandoned atomic.Int64
	wedged    atomic.Bool
	// failures counts the failed calls in a row.
	failures atomic.Int64
	// calls counts the incarnation's Handle calls whose request is still
	// live: its stop waits for them (within a bound: runShutdown,
	// drainAdmissions) before the webhook's Shutdown, so that Shutdown does
	// not run beside a Handle whose answer is still awaited.
	calls sync.WaitGroup
}

// admit answers m with a refusal, or starts the goroutine that serves it.
func (c *child) admit(m *AdmissionCall) {
	if !m.take() {
		return // abandoned by its caller, answered already
	}
	wh, ok := c.spec.Impl.(actors.Webhook)
	switch {
	case !ok || c.spec.Kind != actors.KindWebhook:
		refuse(m, fmt.Errorf("%w: %s %q is not a webhook", actors.ErrWebhookUnavailable, c.spec.Kind, c.spec.Name))
		return
	case c.state != stateRunning:
		refuse(m, fmt.Errorf("%w: webhook %q is %s", actors.ErrWebhookUnavailable, c.spec.Name, c.standing()))
		return
	}
	a := c.admission // a webhook has one
	if a.runs == nil || a.gen != c.gen {
		a.gen, a.runs = c.gen, &admissionRuns{}
	}
	gen, runs := c.gen, a.runs
	if limit := m.Policy.MaxInFlight; limit > 0 && runs.inFlight.Load() >= int64(limit) {
		refuse(m, fmt.Errorf("%w: webhook %q already serves %d", actors.ErrTooManyRequests, c.spec.Name, limit))
		return
	}
	runs.inFlight.Add(1)
	runs.calls.Add(1)
	c.cfg.Goroutines.Go(func() { c.serveAdmission(wh, m, gen, runs) })
}

// drainAdmissions waits until the Handle calls counted by calls are no
// longer awaited (each returned, or its request ended), or its bound has
// passed. A ShutdownAndWait's stop (its watch judges its calls against
// its context) waits for as long as its context lasts: it is the caller's
// bound for the whole stop, and a Shutdown past it makes the webhook
// unstopped, as it says. Any other stop waits at most half of what is left
// of its context (ShutdownTimeout), so that a Handle that hangs with its
// request still live leaves Shutdown the other half: the restart does not
// turn into an overdue Shutdown, which escalates. Past the bound Shutdown
// runs anyway, beside the calls that still run.
func drainAdmissions(ctx context.Context, calls *sync.WaitGroup) {
	idle := make(chan struct{})
	go func() { calls.Wait(); close(idle) }() // ends with the last call's request, at the latest
	var bound <-chan time.Time
	if deadline, ok := ctx.Deadline(); ok && !watchOf(ctx).judges() {
		timer := time.NewTimer(time.Until(deadline) / 2)
		defer timer.Stop()
		bound = timer.C
	}
	select {
	case <-idle:
	case <-ctx.Done():
	case <-bound:
	}
}

func refuse(m *AdmissionCall, err error) {
	select {
	case m.Reply <- AdmissionResult{Refused: err}:
	default:
	}
}

// serveAdmission runs Ready, then Handle, for one call, in a goroutine of
// the child's; it accounts for the outcome before it answers, so that a
// failure reaches the actor before the caller can send another request.
func (c *child) serveAdmission(wh actors.Webhook, m *AdmissionCall, gen uint64, runs *admissionRuns) {
	a := c.admission
	defer runs.inFlight.Add(-1)
	name := c.spec.Name
	ctx := m.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	// The call stops holding a stop once it returns or its request ends
	// (its answer is then no longer awaited), whichever is first.
	var doneOnce sync.Once
	done := func() { doneOnce.Do(runs.calls.Done) }
	defer done()
	releaseDone := context.AfterFunc(ctx, done)
	defer releaseDone()

	if err := a.ready.wait(ctx, gen, m.Policy.ReadyTimeout, func() (ready bool, err error) {
		err = Call(actors.KindWebhook, name, "Ready", func() error { ready = wh.Ready(); return nil })
		if err != nil {
			c.system.Root.Send(c.self, callFailed{gen: gen, err: err})
		}
		return ready, err
	}); err != nil {
		refuse(m, fmt.Errorf("%w: webhook %q: %w", actors.ErrWebhookNotReady, name, err))
		return
	}

	// outcome: callRunning while Handle runs; then callReturned once it
	// has returned, or callEnded once its request ended first, and
	// callAbandoned if it still runs abandonGrace later (it then counts in
	// runs.abandoned until it returns). Whichever of returning and the
	// request's end comes first counts. Only a deadline counts as a
	// failure: a request its client gave up on says nothing about the
	// webhook.
	// One variable for them all, so that the closures cost one allocation.
	var call struct {
		outcome atomic.Int32
		grace   *time.Timer // set before outcome leaves callRunning, read after
		// reported counts the two ends of an abandoned call, the grace
		// timer's report and Handle's return: the second reports the
		// return to m.Abandonments, so that it never comes before the report.
		reported atomic.Int32
	}
	outcome := &call.outcome
	stop := context.AfterFunc(ctx, func() {
		call.grace = time.AfterFunc(abandonGrace, func() {
			if outcome.CompareAndSwap(callEnded, callAbandoned) {
				if o := m.Abandonments; o != nil {
					o.Abandoned()
					if call.reported.Add(1) == 2 {
						o.Returned()
					}
				}
				c.abandonAdmission(gen, runs, m.Policy)
			}
		})
		if !outcome.CompareAndSwap(callRunning, callEnded) {
			call.grace.Stop()
			return
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.accountAdmission(gen, runs, m.Policy, fmt.Errorf("webhook %q: Handle did not return before the request's deadline: %w", name, context.DeadlineExceeded))
		}
	})
	var resp *admissionv1.AdmissionResponse
	err := Call(actors.KindWebhook, name, "Handle", func() error {
		var err error
		resp, err = wh.Handle(ctx, m.Request)
		if err == nil && resp == nil {
			err = actors.ErrNoResponse
		}
		return err
	})
	stop()
	switch {
	case outcome.CompareAndSwap(callRunning, callReturned):
		if !errors.Is(ctx.Err(), context.Canceled) {
			c.accountAdmission(gen, runs, m.Policy, err)
		}
	case outcome.CompareAndSwap(callEnded, callReturned): // within the grace: never counted as abandoned
		call.grace.Stop()
	default: // abandoned: it gives its slot back (deferred) and no longer counts as holding it
		runs.abandoned.Add(-1)
		if o := m.Abandonments; o != nil && call.reported.Add(1) == 2 {
			o.Returned()
		}
	}
	if err != nil {
		resp = nil
	}
	select {
	case m.Reply <- AdmissionResult{Response: resp, Err: err}:
	default:
	}
}

// The outcomes of a Handle call (serveAdmission).
const (
	callRunning int32 = iota
	callReturned
	callEnded
	callAbandoned
)

// abandonGrace is how long a Handle may run on after its request ended
// before the call counts as abandoned: one that honours its context
// returns well within it, so that a burst of deadlines, or of clients
// going away, while every slot is taken does not fail the webhook.
const abandonGrace = time.Second

// abandonAdmission counts a call of incarnation gen whose Handle still ran
// abandonGrace after its request ended. Once such calls hold every
// MaxInFlight slot the incarnation fails, whatever FailureThreshold says:
// no request can be served by it until they return, which a Handle that
// ignores its context may never do, and the restart gives the new
// incarnation a budget of its own. A call that returns later gives its
// slot back as usual.
func (c *child) abandonAdmission(gen uint64, runs *admissionRuns, p AdmissionPolicy) {
	n, limit := runs.abandoned.Add(1), int64(p.MaxInFlight)
	if limit <= 0 || n < limit || !runs.wedged.CompareAndSwap(false, true) {
		return
	}
	c.system.Root.Send(c.self, callFailed{gen: gen, err: fmt.Errorf(
		"webhook %q: %w: all %d of its MaxInFlight slots", c.spec.Name, actors.ErrHandlesAbandoned, limit)})
}

// accountAdmission counts one call's outcome; a panic, or FailureThreshold
// failures in a row, fail the incarnation gen.
func (c *child) accountAdmission(gen uint64, runs *admissionRuns, p AdmissionPolicy, err error) {
	if err == nil {
		if runs.failures.Load() != 0 { // read first: no shared write on the fast path
			runs.failures.Store(0)
		}
		return
	}
	c.cfg.Logger.Warn("webhook call failed", "child", c.spec.Name, "err", err)
	if _, panicked := errors.AsType[*actors.PanicError](err); panicked {
		c.system.Root.Send(c.self, callFailed{gen: gen, err: err})
		return
	}
	n := runs.failures.Add(1)
	if p.FailureThreshold > 0 && n >= int64(p.FailureThreshold) {
		runs.failures.Store(0)
		c.system.Root.Send(c.self, callFailed{gen: gen, err: fmt.Errorf(
			"webhook %q: %d admission calls in a row failed, the last: %w", c.spec.Name, n, err)})
	}
}

// readyGate runs at most one Ready call at a time for a webhook's admission
// requests, per incarnation: requests that arrive while one runs wait for its
// answer, each up to its own timeout, so a Ready that hangs costs one
// goroutine, not one per request, and no request waits longer than its
// ReadyTimeout. A new incarnation (a restart) does not join the old one's
// call: a Ready that hung in the incarnation before would otherwise refuse
// every request after the restart that was to cure it.
type readyGate struct {
	mu   sync.Mutex
	call *readyCall
}

type readyCall struct {
	gen   uint64 // the incarnation whose Ready it is
	done  chan struct{}
	ready bool
	err   error
}

// wait returns nil once a Ready call of incarnation gen that began no
// earlier than wait was called (or one in flight) answers true; else why
// not.
func (g *readyGate) wait(ctx context.Context, gen uint64, timeout time.Duration, ready func() (bool, error)) error {
	g.mu.Lock()
	call := g.call
	if call == nil || call.gen != gen {
		call = &readyCall{gen: gen, done: make(chan struct{})}
		g.call = call
		go func() {
			call.ready, call.err = ready()
			g.mu.Lock()
			if g.call == call { // else a later incarnation's has taken its place
				g.call = nil
			}
			g.mu.Unlock()
			close(call.done)
		}()
	}
	g.mu.Unlock()

	select {
	case <-call.done:
	default:
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-call.done:
		case <-timer.C:
			return fmt.Errorf("Ready did not answer within %s", timeout)
		case <-ctx.Done():
			return fmt.Errorf("Ready did not answer before the request ended: %w", ctx.Err())
		}
	}
	switch {
	case call.err != nil:
		return call.err
	case !call.ready:
		return errors.New("Ready returned false")
	}
	return nil
}
