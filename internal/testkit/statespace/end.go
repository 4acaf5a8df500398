package statespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	cm "github.com/actorkube/controllermanager"
)

// settle waits, without healing anything, until every bounded-time
// obligation is met or overdue (a stuck state's obligation lives only
// while the child is idle in it).
func (r *runner) settle(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.Now().Add(r.sc.maxBackoff() + ShutdownTimeout + FenceTimeout + 3*r.cfg.Slack)
	r.check(ctx)
	for {
		r.mu.Lock()
		left := len(r.obligations)
		r.mu.Unlock()
		if left == 0 || ctx.Err() != nil {
			return
		}
		if time.Now().After(limit) {
			r.logf("settle: %d obligations still pending at the limit", left)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		r.check(ctx)
	}
}

// heal releases every hung call, reconnects the replica, has its watches
// deliver and its lists answered again and makes every child calm.
func (r *runner) heal() {
	r.logf("heal: hung calls released, network back, watches delivering, lists answered, children calm")
	close(r.release)
	r.latency.Store(0)
	r.stalled.Store(false)
	r.listsHung.set(false)
	if r.client != nil {
		r.client.Partition(false)
	}
	if r.fleet != nil {
		r.fleet.heal()
	}
	r.mu.Lock()
	for _, c := range r.children {
		c.set(func(k *Knobs) { *k = Knobs{} })
	}
	r.mu.Unlock()
}

// checkReelected: with Reelect, a manager that was started and neither
// asked to stop nor stopped comes back, once every fault has healed, to
// Running holding every shard (NotReelected). Its bound: what a stolen
// Lease has still to run, then a lease duration (its own last hold
// expiring), the fence, the longest backoff (a store recovering after the
// stand-down) and a few retry periods, plus Slack.
func (r *runner) checkReelected(ctx context.Context) {
	r.mu.Lock()
	judged := r.srv != nil && r.sc.Election == Reelect && r.started && r.shutdownReq.IsZero()
	stealUntil := r.stealUntil
	r.mu.Unlock()
	stealLeft := max(0, time.Until(stealUntil))
	stole := "no Steal"
	if !stealUntil.IsZero() {
		stole = "the last Steal expired " + stamp(stealUntil)
	}
	if !judged {
		return
	}
	r.mu.Lock()
	r.reelectJudged = true
	r.mu.Unlock()
	bound := stealLeft + LeaseDuration + FenceTimeout + r.sc.maxBackoff() + 5*RetryPeriod + r.cfg.Slack
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		select {
		case <-r.m.Done():
			// It stopped by itself: once its Start has returned nil (a
			// Start that failed ended it, and said so), only an
			// escalation, or a fencing that did not complete in time,
			// ends a Reelect manager nobody asked to stop. The rest of
			// how it stopped is the other invariants' to judge.
			r.mu.Lock()
			startedOK := r.startedOK
			r.mu.Unlock()
			if err := r.m.Err(); startedOK && !endsReelect(err) {
				r.violate(Violation{Invariant: NotReelected, Time: time.Now(),
					Detail: fmt.Sprintf("the manager ended by itself with neither an escalation nor an incomplete fencing: %v", err)})
			}
			return
		default:
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := r.m.Status(sctx)
		cancel()
		if err == nil {
			if last = r.unelected(st); last == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			r.violate(Violation{Invariant: NotReelected, Time: time.Now(),
				Detail: fmt.Sprintf("%s, %s after every fault had healed (%s)", last, bound.Round(time.Millisecond), stole)})
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// endsReelect reports whether err, a Reelect manager's Err once it has
// stopped by itself, is one of the ends Reelect allows: an escalation (a
// budget spent, a hung Shutdown), or a lost lease whose fencing did not
// complete within the fence timeout (the process must exit).
func endsReelect(err error) bool {
	var esc *cm.EscalationError
	return errors.As(err, &esc) || errors.Is(err, cm.ErrLeaseLost)
}

// unelected says how st falls short of Running with every shard held, or "".
func (r *runner) unelected(st cm.Status) string {
	if st.Phase != cm.PhaseRunning {
		return fmt.Sprintf("phase %s (leader %v)", st.Phase, st.Leader)
	}
	if r.sc.Shards <= 1 {
		if !st.Leader {
			return "Running without the lease"
		}
		return ""
	}
	var missing []int
	for _, sh := range st.Shards {
		if !sh.Held {
			missing = append(missing, sh.Index)
		}
	}
	if len(missing) > 0 || len(st.Shards) != r.sc.Shards {
		return fmt.Sprintf("Running without shards %v of %d", missing, r.sc.Shards)
	}
	return ""
}

// finish shuts the manager down and checks how it ended.
func (r *runner) finish(ctx context.Context) {
	defer close(r.doneWatch)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r.m.ShutdownAndWait(sctx)
	cancel()
	close(r.admissionStop)
	select {
	case <-r.m.Done():
	case <-time.After(r.cfg.Slack):
		r.violate(Violation{Invariant: DoneWrong, Detail: "Done did not close after ShutdownAndWait, with every hung call released"})
	}
	if r.startCancel != nil {
		r.startCancel()
	}
	waited := make(chan struct{})
	go func() { r.background.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		r.violate(Violation{Invariant: DoneWrong, Detail: "a Start, ShutdownAndWait or Request did not return within 15s of the end"})
	}
	r.checkLease(time.Now())
	r.checkEnd()
}

func (r *runner) checkEnd() {
	select {
	case <-r.m.Done():
	default:
		return // reported by finish
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	final, err := r.m.Status(ctx)
	if err != nil {
		r.violate(Violation{Invariant: DoneWrong, Detail: "Status after Done: " + err.Error()})
		return
	}
	r.mu.Lock()
	events := slices.Clone(r.events)
	r.mu.Unlock()

	// Done closes once, and the phase, the events and Err agree on how.
	if !final.Phase.Ended() {
		r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("Done is closed but Status says phase %s", final.Phase)})
	}
	var ends, elections int
	acquired := map[int]bool{}
	var last cm.Phase
	escalated := false
	for _, e := range events {
		switch e.Type {
		case cm.PhaseChanged:
			last = e.Phase
			if e.Phase.Ended() {
				ends++
			}
		case cm.Escalated:
			escalated = true
		case cm.LeaderElected:
			elections++
		case cm.ShardAcquired:
			// A shard acquired again restarts its controllers afresh, as a
			// second election does.
			if acquired[e.Shard] {
				elections = max(elections, 1) + 1 // as a second election
			}
			acquired[e.Shard] = true
		}
	}
	if ends != 1 {
		r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("%d PhaseChanged events into a final phase, want 1", ends)})
	}
	if last != final.Phase {
		r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("the last PhaseChanged event says %s, Status %s", last, final.Phase)})
	}
	cause := r.m.Err()
	var unstopped *cm.UnstoppedError
	if errors.As(cause, &unstopped) && cause.Error() == unstopped.Error() {
		cause = nil // a shutdown that overran its context; not why the manager stopped
	}
	switch final.Phase {
	case cm.PhaseStopped:
		if cause != nil {
			r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("Stopped, but Err() is %v", cause)})
		}
		if escalated {
			r.violate(Violation{Invariant: DoneWrong, Detail: "Stopped after an Escalated event"})
		}
	case cm.PhaseFailed:
		var esc *cm.EscalationError
		switch {
		case cause == nil:
			r.violate(Violation{Invariant: DoneWrong, Detail: "Failed, but Err() is nil"})
		case escalated && !errors.As(cause, &esc):
			r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("Failed after an Escalated event, but Err() is %v", cause)})
		}
	}
	if (final.Err == nil) != (cause == nil) {
		r.violate(Violation{Invariant: DoneWrong, Detail: fmt.Sprintf("the final Status.Err is %v but Err() is %v", final.Err, cause)})
	}

	// No lease guard passes once the manager has stopped, and no member
	// cluster's Config.
	r.checkGuards(true)
	r.checkFleetEnd()

	// Every incarnation was shut down once its start call had returned.
	for _, in := range r.journal.Incarnations() {
		switch {
		case in.StartOpen:
			r.violate(Violation{Invariant: NotShutDown, Child: in.Child, Detail: fmt.Sprintf("incarnation %d's start call never returned", in.Inc)})
		case !in.ShutdownIn:
			r.violate(Violation{Invariant: NotShutDown, Child: in.Child, Detail: fmt.Sprintf("incarnation %d (started %s, returned %v) was never shut down", in.Inc, stamp(in.From), in.StartedOK)})
		}
	}

	// The books: Status, the events, the metrics, the children's own calls.
	metrics, err := scrape(r.m)
	if err != nil {
		r.violate(Violation{Invariant: Books, Detail: err.Error()})
	}
	for _, cs := range flatten(final.Children) {
		if m := fleetMember(cs.Name); m != "" && r.fleet.rebuilt(m) {
			// Built again (rotated, engaged again, its group removed by
			// hand): Status and the metrics count from the last build, the
			// events and the child's journal from the first.
			continue
		}
		var restarted, failed int
		for _, e := range events {
			if e.Child != cs.Name {
				continue
			}
			switch e.Type {
			case cm.ChildRestarted:
				restarted++
			case cm.ChildFailed:
				failed++
			}
		}
		mt := metrics[cs.Name]
		if cs.Restarts != restarted || float64(cs.Restarts) != mt.restarts {
			r.violate(Violation{Invariant: Books, Child: cs.Name, Detail: fmt.Sprintf("restarts: Status %d, events %d, metrics %v", cs.Restarts, restarted, mt.restarts)})
		}
		if cs.Failures != failed || float64(cs.Failures) != mt.failures {
			r.violate(Violation{Invariant: Books, Child: cs.Name, Detail: fmt.Sprintf("failures: Status %d, events %d, metrics %v", cs.Failures, failed, mt.failures)})
		}
		// Every start call after the first is a restart, a re-election's too.
		if starts := len(r.journal.Of(cs.Name)); starts > 0 && starts != cs.Restarts+1 {
			r.violate(Violation{Invariant: Books, Child: cs.Name, Detail: fmt.Sprintf("its own start calls %d, Status.Restarts %d (want start calls - 1)", starts, cs.Restarts)})
		}
	}
}

type childMetrics struct{ restarts, failures float64 }

func scrape(m *cm.ControllerManager) (map[string]childMetrics, error) {
	families, err := m.Gatherer().Gather()
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := map[string]childMetrics{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			var name string
			for _, l := range mt.GetLabel() {
				if l.GetName() == "child" {
					name = l.GetValue()
				}
			}
			c := out[name]
			switch f.GetName() {
			case "controllermanager_child_restarts_total":
				c.restarts = mt.GetCounter().GetValue()
			case "controllermanager_child_failures_total":
				c.failures = mt.GetCounter().GetValue()
			default:
				continue
			}
			out[name] = c
		}
	}
	return out, nil
}
