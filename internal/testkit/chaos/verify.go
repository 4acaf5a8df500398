package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// scrape reads the manager's health and metrics twice a second until ctx
// ends: GetHealth must answer within HealthTimeout (plus scheduling slack)
// whatever the children do, and a scrape must not fail.
func (h *Harness) scrape(ctx context.Context) {
	bound := h.cfg.Supervision.HealthTimeout.Duration + 2*time.Second
	every(ctx, 2, func() {
		begin := time.Now()
		_ = h.mgr.GetHealth()
		took := time.Since(begin)
		h.stats.healthCalls.Add(1)
		for {
			old := h.stats.healthMax.Load()
			if int64(took) <= old || h.stats.healthMax.CompareAndSwap(old, int64(took)) {
				break
			}
		}
		if took > bound {
			h.violate("GetHealth took %s, more than HealthTimeout %s", took, h.cfg.Supervision.HealthTimeout.Duration)
		}
		if _, err := h.mgr.Gatherer().Gather(); err != nil {
			h.violate("metrics scrape: %v", err)
		}
		h.stats.scrapes.Add(1)
	})
}

// quiet is how long no event must arrive for the tree to count as settled:
// a failure reported just before the faults ended may still be on its way
// through a child's mailbox when Status already says every child runs.
const quiet = 500 * time.Millisecond

// Settle ends the faults and brings the tree back: every child stopped by a
// StopChild is started again, and Settle returns once every child is
// Running, the checker has seen every event Status accounts for, no
// reported failure it expects is still on its way, every liveness sweep
// begun under the faults has ended, and no event has come for a while.
func (h *Harness) Settle(ctx context.Context) error {
	h.Calm()
	// A liveness sweep that began before the calm holds answers given
	// under faults until its deadline, HealthTimeout later; its failures are
	// published then. No sweep begun after the calm finds a fault.
	sweeps := time.Now().Add(h.cfg.Supervision.HealthTimeout.Duration)
	var last string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := h.status(ctx)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		var stopped []*child
		settled := true
		h.mu.Lock()
		if time.Since(h.lastEvent) < quiet || time.Since(sweeps) < quiet {
			settled = false
		}
		for _, c := range h.live {
			if len(c.tally.expect) > 0 {
				settled = false
			}
		}
		for _, cs := range st.Children {
			switch cs.State {
			case supervisor.StateRunning:
				c := h.byName[cs.Name]
				if c == nil || c.tally.restarted != cs.Restarts || c.tally.failed != cs.Failures {
					settled = false // its events are on their way
				}
			case supervisor.StateStopped:
				stopped = append(stopped, h.byName[cs.Name])
				settled = false
			default:
				settled = false
			}
		}
		h.mu.Unlock()
		if settled && st.Phase == cm.PhaseRunning {
			h.settledAt = time.Now()
			return nil
		}
		last = fmt.Sprintf("phase %s, %s", st.Phase, stateCounts(st))
		var wg sync.WaitGroup
		for _, c := range stopped {
			if c != nil {
				wg.Go(func() { _ = h.request(opStart, c, supervisor.StartChild{Name: c.name}) })
			}
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return fmt.Errorf("settle: the tree did not settle: %s", last)
		case <-tick.C:
		}
	}
}

func stateCounts(st cm.Status) string {
	n := map[supervisor.ChildState]int{}
	for _, c := range st.Children {
		n[c.State]++
	}
	var parts []string
	for s, k := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", s, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (h *Harness) status(ctx context.Context) (cm.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return h.mgr.Status(ctx)
}

// Verify compares, once the tree has settled, every child's restarts and
// failures in the events, in Status, in the metrics and in its own records,
// the admission answers with the Handle calls, and reports the reported
// failures that were never counted.
func (h *Harness) Verify(ctx context.Context) error {
	st, err := h.status(ctx)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	metrics, err := scrapeChildren(h.mgr.Gatherer())
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkPendingBudget()
	inStatus := map[string]bool{}
	for _, cs := range st.Children {
		inStatus[cs.Name] = true
		c := h.byName[cs.Name]
		if c == nil {
			h.violate("Status lists %q, a child the harness never made", cs.Name)
			continue
		}
		starts, _, _, _ := c.records()
		m := metrics[cs.Name]
		if cs.Restarts != c.tally.restarted || float64(cs.Restarts) != m.restarts || cs.Restarts != starts-1 {
			h.violate("%s restarts: Status %d, metrics %v, events %d, its own start calls - 1 = %d (Status %s since %s; settled at %s; its last events: %s)",
				cs.Name, cs.Restarts, m.restarts, c.tally.restarted, starts-1, cs.State, cs.Since.Format("15:04:05.000000"),
				h.settledAt.Format("15:04:05.000000"), c.tally.history())
		}
		if cs.Failures != c.tally.failed || float64(cs.Failures) != m.failures {
			h.violate("%s failures: Status %d, metrics %v, events %d", cs.Name, cs.Failures, m.failures, c.tally.failed)
		}
		if cs.Kind != c.kind {
			h.violate("%s: Status says kind %s", cs.Name, cs.Kind)
		}
	}
	for _, c := range h.live {
		if !inStatus[c.name] {
			h.violate("%s was added and not removed, and is not in Status", c.name)
		}
	}
	for _, c := range h.live {
		h.checkUncounted(c)
		h.checkAdmission(c)
	}
	for _, c := range h.retired {
		h.checkRemoved(c)
	}
	return nil
}

// checkRemoved checks a child removed from the manager: it was shut down
// once per start call, and its restarts agree in the ChildRemoved event,
// the ChildRestarted events and its own records.
func (h *Harness) checkRemoved(c *child) {
	starts, shutdowns, _, ph := c.records()
	if !c.tally.removed {
		h.violate("%s was removed (RemoveChild answered) and no ChildRemoved event came", c.name)
	}
	if c.tally.removedAt != c.tally.restarted || c.tally.restarted != max(starts-1, 0) {
		h.violate("removed %s restarts: ChildRemoved %d, events %d, its own start calls - 1 = %d",
			c.name, c.tally.removedAt, c.tally.restarted, starts-1)
	}
	if starts != shutdowns || ph != idle {
		h.violate("removed %s: %d start calls, %d Shutdown calls, %s", c.name, starts, shutdowns, ph)
	}
	h.checkUncounted(c)
	h.checkAdmission(c)
}

// checkUncounted reports the failures c reported, untouched by any
// lifecycle message, that were never counted.
func (h *Harness) checkUncounted(c *child) {
	for inc := range c.tally.expect {
		h.violate("%s: incarnation %d reported a failure, untouched by any lifecycle message, and it was never counted", c.name, inc)
	}
}

// checkAdmission checks that every Handle call of a webhook was answered
// 200, and that every other 200 is a denial at the request's deadline: on a
// loaded machine the deadline can pass before the webhook's actor calls
// Handle, and the handler then answers with that denial, as documented.
func (h *Harness) checkAdmission(c *child) {
	if _, _, handled, _ := c.records(); c.kind == actors.KindWebhook &&
		(handled > c.tally.ok200 || c.tally.ok200 > handled+c.tally.timedOut) {
		h.violate("%s: %d Handle calls, %d admission requests answered 200 (%d of them timeout denials)",
			c.name, handled, c.tally.ok200, c.tally.timedOut)
	}
}

// checkPendingBudget settles a budget decision that no event followed.
func (h *Harness) checkPendingBudget() {
	if h.pending != nil {
		h.settleBudget()
	}
}

// Escalate adds a child that fails as soon as it has started, every time,
// until its restart budget is spent, and waits for the manager to escalate.
// It returns the child's name.
func (h *Harness) Escalate(ctx context.Context) (string, error) {
	c := h.newChild(actors.KindController)
	c.mu.Lock()
	c.reckless = true
	c.mu.Unlock()
	if err := h.request(opAdd, c, supervisor.AddChild{Runnable: c.value()}); err != nil {
		return c.name, fmt.Errorf("escalate: %w", err)
	}
	h.mu.Lock()
	h.live = append(h.live, c)
	h.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		h.mu.Lock()
		who := h.escalated
		h.mu.Unlock()
		if who != "" {
			if who != c.name {
				return c.name, fmt.Errorf("escalate: %s escalated, not %s", who, c.name)
			}
			return c.name, nil
		}
		select {
		case <-ctx.Done():
			return c.name, fmt.Errorf("escalate: %s did not escalate: %w", c.name, ctx.Err())
		case <-tick.C:
		}
	}
}

// Final checks the children's own records once the manager has stopped:
// every start call was followed by exactly one Shutdown.
func (h *Harness) Final() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkPendingBudget()
	for _, c := range slices.Concat(h.live, h.retired, h.failedAdds) {
		starts, shutdowns, _, ph := c.records()
		if starts != shutdowns || ph != idle {
			h.violate("%s: %d start calls, %d Shutdown calls, %s at the end", c.name, starts, shutdowns, ph)
		}
		h.checkUncounted(c)
	}
}

// Children returns how many children the harness made in all (removed ones
// and added ones included) and how many are in the manager.
func (h *Harness) Children() (made, live int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nextID, len(h.live)
}

// childMetrics are one child's series in a scrape.
type childMetrics struct{ restarts, failures float64 }

// scrapeChildren reads controllermanager_child_restarts_total and
// controllermanager_child_failures_total from a scrape, by child.
func scrapeChildren(g prometheus.Gatherer) (map[string]childMetrics, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("metrics scrape: %w", err)
	}
	out := map[string]childMetrics{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var name string
			for _, l := range m.GetLabel() {
				if l.GetName() == "child" {
					name = l.GetValue()
				}
			}
			cm := out[name]
			switch f.GetName() {
			case "controllermanager_child_restarts_total":
				cm.restarts = m.GetCounter().GetValue()
			case "controllermanager_child_failures_total":
				cm.failures = m.GetCounter().GetValue()
			default:
				continue
			}
			out[name] = cm
		}
	}
	return out, nil
}
