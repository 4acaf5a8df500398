package chaos

import (
	"context"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// injectFaults strikes a child chosen at random FaultRate times a second,
// each child at most once per MinFaultGap.
func (h *Harness) injectFaults(ctx context.Context) {
	every(ctx, h.cfg.FaultRate, func() {
		if c := h.randomLive(""); c != nil {
			h.inject(c)
		}
	})
}

// inject sets up one fault of c, chosen at random among those of its kind.
// A fault that strikes when the child restarts (a failing start, a slow,
// hung or panicking Shutdown) comes with a reported failure, so that it
// strikes now.
func (h *Harness) inject(c *child) {
	kinds := faultsFor[string(c.kind)]
	kind := kinds[h.intN(len(kinds))]
	now := time.Now()
	if kind == FaultReport {
		h.injectReport(c, now, false)
		return
	}
	c.mu.Lock()
	if now.Sub(c.lastFault) < h.cfg.MinFaultGap || c.shutdown == shutdownHeld {
		c.mu.Unlock()
		return
	}
	restart := false
	switch kind {
	case FaultHealthPanic:
		c.healthPanic = true
	case FaultUnhealthy:
		c.unhealthyUntil = now.Add(h.between(time.Second, 4*time.Second))
		c.unhealthySeq = h.faultSeq.Add(1)
	case FaultHealthHang:
		c.hangUntil = now.Add(h.between(time.Second, 4*time.Second))
	case FaultStartError, FaultStartPanic:
		c.startFault, restart = kind, true
	case FaultSlowShutdown:
		c.shutdown, c.shutdownFor, restart = shutdownSlow, h.between(10*time.Millisecond, 200*time.Millisecond), true
	case FaultHungShutdown:
		c.shutdown, c.shutdownFor, restart = shutdownHung, h.between(200*time.Millisecond, 2*time.Second), true
	case FaultShutdownPanic:
		c.shutdown, restart = shutdownPanic, true
	case FaultHandlePanic:
		c.handlePanic = true
	case FaultHandleErrors:
		c.handleErrors = handleFailureThreshold + 1
	case FaultHandleSlow:
		c.handleSlow = true
	}
	c.lastFault = now
	c.everFaulted[kind] = true
	c.mu.Unlock()
	h.stats.injected[kind].Add(1)
	if restart {
		h.injectReport(c, now, true)
	}
}

// injectReport has c's running incarnation report a failure from its
// background work (bundled: with a fault set up just now, within the same
// gap). When no lifecycle message for c is in flight, the
// failure must be counted (unless the incarnation fails otherwise first):
// the checker expects it.
func (h *Harness) injectReport(c *child, now time.Time, bundled bool) {
	h.mu.Lock()
	c.mu.Lock()
	report, inc := c.report, c.starts
	ok := c.phase == running && report != nil && (bundled || now.Sub(c.lastFault) >= h.cfg.MinFaultGap)
	if ok {
		c.lastFault = now
		c.everFaulted[FaultReport] = true
	}
	c.mu.Unlock()
	if ok && c.tally.inFlight == 0 && c.tally.lastFailedInc != inc && !c.tally.removed && c.kind != actors.KindRunnable {
		if c.tally.expect == nil {
			c.tally.expect = map[int]bool{}
		}
		c.tally.expect[inc] = true
		h.stats.mustRegistered.Add(1)
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	h.stats.injected[FaultReport].Add(1)
	report(h.strike(c, FaultReport, inc))
}
