package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// budgetSlack absorbs the difference between a ChildFailed event's time and
// the moment the supervisor spent the budget (the same Receive, so
// microseconds apart): a failure this close to the edge of the window may
// go either way.
const budgetSlack = 5 * time.Millisecond

// onEvent checks one event as it arrives, in order.
func (h *Harness) onEvent(e cm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastEvent = time.Now()
	if h.pending != nil && !(e.Type == cm.Escalated && e.Child == h.pending.name) {
		h.settleBudget()
	}
	var c *child
	if e.Child != "" {
		c = h.byName[e.Child]
		if c == nil && e.Type != cm.EventsDropped {
			h.violate("%s event for %q, a child the harness never made", e.Type, e.Child)
			return
		}
	}
	if c != nil {
		c.tally.note(fmt.Sprintf("%s %s restarts=%d%s", e.Time.Format("15:04:05.000000"), e.Type, e.Restarts, errSuffix(e.Err)))
	}
	switch e.Type {
	case cm.PhaseChanged:
		if e.Phase.Ended() {
			h.ended = true
		}
	case cm.ChildStarted:
		h.stats.started.Add(1)
	case cm.ChildStopped:
		h.stats.stopped.Add(1)
		if e.Err != nil {
			if f, ok := errors.AsType[*Fault](e.Err); !ok || f.Kind != FaultShutdownPanic || f.Child != c.name {
				h.violate("ChildStopped of %s with an error no fault explains: %v", c.name, e.Err)
			}
			h.stats.shutdownPanics.Add(1)
		}
	case cm.ChildRestarted:
		h.stats.restarts.Add(1)
		c.tally.restarted++
		if e.Restarts != c.tally.restarted {
			h.violate("ChildRestarted of %s says %d restarts, its events %d", c.name, e.Restarts, c.tally.restarted)
		}
		if h.escalated != "" {
			h.violate("%s restarted after %s escalated", c.name, h.escalated)
		}
	case cm.ChildFailed:
		h.stats.failures.Add(1)
		h.onFailed(c, e)
	case cm.ChildUnhealthy:
		h.stats.unhealthy.Add(1)
	case cm.Escalated:
		h.stats.escalations.Add(1)
		switch {
		case h.pending == c:
			h.pending = nil
		case strings.Contains(e.Err.Error(), "Shutdown did not return within"):
			h.violate("%s escalated because a restart's Shutdown outlived ShutdownTimeout (hung Shutdowns are shorter): %v", c.name, e.Err)
		default:
			h.violate("%s escalated within its restart budget: %v", c.name, e.Err)
		}
		h.escalated = c.name
	case cm.ChildRemoved:
		c.tally.removed = true
		c.tally.removedAt = e.Restarts
		if e.Restarts != c.tally.restarted {
			h.violate("ChildRemoved of %s says %d restarts, its events %d", c.name, e.Restarts, c.tally.restarted)
		}
	case cm.ChildUnstopped:
		h.stats.unstopped.Add(1)
	case cm.EventsDropped:
		h.violate("the checker fell behind: %v", e.Err)
	}
}

// onFailed checks a ChildFailed: it belongs to the incarnation its restarts
// say, which has not failed before, and a fault of the child explains it;
// then the restart budget is replayed.
func (h *Harness) onFailed(c *child, e cm.Event) {
	inc := e.Restarts + 1
	if e.Restarts != c.tally.restarted {
		h.violate("ChildFailed of %s says %d restarts, its events %d", c.name, e.Restarts, c.tally.restarted)
	}
	if inc == c.tally.lastFailedInc {
		h.violate("%s: incarnation %d failed twice: %v", c.name, inc, e.Err)
	}
	c.tally.lastFailedInc = inc
	c.tally.failed++
	if c.tally.expect[inc] {
		delete(c.tally.expect, inc)
		h.stats.mustResolved.Add(1)
	}
	h.explain(c, e, inc)

	// The budget, as the supervisor spends it.
	max, window := int(h.cfg.Supervision.MaxRestarts), h.cfg.Supervision.RestartWindow.Duration
	c.tally.budget = slices.DeleteFunc(c.tally.budget, func(at time.Time) bool { return !at.After(e.Time.Add(-window - budgetSlack)) })
	surely, maybe := 0, len(c.tally.budget)
	for _, at := range c.tally.budget {
		if at.After(e.Time.Add(-window + budgetSlack)) {
			surely++
		}
	}
	switch {
	case surely >= max || maybe >= max:
		h.pending, h.pendingMust, h.pendingAt = c, surely >= max, e.Time
	default:
		c.tally.budget = append(c.tally.budget, e.Time)
	}
}

// settleBudget decides a pending budget check: the event after a ChildFailed
// past the budget was not its Escalated.
func (h *Harness) settleBudget() {
	c := h.pending
	h.pending = nil
	if h.pendingMust {
		h.violate("%s failed past its restart budget (%d within %s) and did not escalate",
			c.name, h.cfg.Supervision.MaxRestarts, h.cfg.Supervision.RestartWindow.Duration)
		return
	}
	c.tally.budget = append(c.tally.budget, h.pendingAt) // at the edge: the supervisor spent it
}

// explain finds what made c fail.
func (h *Harness) explain(c *child, e cm.Event, inc int) {
	c.mu.Lock()
	faulted := c.everFaulted
	c.mu.Unlock()
	if f, ok := errors.AsType[*Fault](e.Err); ok {
		if f.Child != c.name {
			h.violate("ChildFailed of %s carries a fault of %s: %v", c.name, f.Child, e.Err)
		}
		switch f.Kind {
		case FaultReport, FaultStartError, FaultStartPanic:
			if f.Inc != inc {
				h.violate("ChildFailed of %s is for incarnation %d, its fault struck incarnation %d: %v", c.name, inc, f.Inc, e.Err)
			}
		default: // a call that began as the incarnation was starting may strike before Run returns
			if f.Inc != inc && f.Inc != inc-1 {
				h.violate("ChildFailed of %s is for incarnation %d, its fault struck incarnation %d: %v", c.name, inc, f.Inc, e.Err)
			}
		}
		if f.counted.Add(1) > 1 {
			h.violate("fault #%d of %s counted as more than one failure", f.Seq, c.name)
		}
		h.stats.counted[f.Kind].Add(1)
		return
	}
	msg := e.Err.Error()
	switch {
	case errors.Is(e.Err, supervisor.ErrUnhealthy) && (strings.Contains(msg, "chaos: unhealthy") || strings.Contains(msg, "webhook not ready")):
		if !faulted[FaultUnhealthy] {
			h.violate("%s failed unhealthy without having been made so: %v", c.name, e.Err)
		}
		h.stats.unhealthyFailures.Add(1)
	case errors.Is(e.Err, supervisor.ErrUnhealthy) && strings.Contains(msg, "no health answer"):
		if faulted[FaultHealthHang] {
			h.stats.silentFailures.Add(1)
		} else {
			h.stats.unexplainedSilences.Add(1) // a probe answered late: the machine is loaded
		}
	case strings.Contains(msg, "Handle did not return before the request's deadline"):
		if !faulted[FaultHandleSlow] {
			h.violate("%s failed by slow Handle calls without having been made slow: %v", c.name, e.Err)
		}
		h.stats.slowHandleFailures.Add(1)
	default:
		h.violate("%s failed for no reason the harness gave it: %v", c.name, e.Err)
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" err=%q", err.Error())
}
