package statespace

import (
	"fmt"
	"strings"
	"time"

	cm "github.com/actorkube/controllermanager"
)

func (r *runner) onEvent(e cm.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	desc := string(e.Type)
	if e.Child != "" {
		desc += " " + e.Child
	}
	if e.Err != nil {
		desc += ": " + e.Err.Error()
	}
	r.logLocked("  event %s (phase %s)", desc, e.Phase)
	if e.Type == cm.PhaseChanged && e.Phase != r.phase {
		r.phase = e.Phase
		close(r.phaseCh)
		r.phaseCh = make(chan struct{})
	}
	switch e.Type {
	case cm.ChildFailed:
		child, at := e.Child, e.Time
		fenced := false // a lost lease stops it, and a new round starts it
		if c := r.children[child]; c != nil {
			fenced = c.kind == "controller" || c.kind == "store"
		}
		if child == fleetName+"/provider" {
			fenced = true // the fleet's runner: a controller, a store with shards
		}
		if isMemberGroup(child) {
			// A member's group: ExhaustedStop (FleetSpec's default) stops
			// it; the stuck check judges its stop.
			break
		}
		if g, ok := r.sc.group(child); ok {
			fenced = true // its controllers and stores are fenced with it
			if g.OnExhausted == cm.ExhaustedStop {
				// Its spent budget (or a hung Shutdown in its restart)
				// takes it out of supervision: it stops and stays
				// stopped; the stuck check judges its stop.
				break
			}
		}
		_, journalled := r.children[child]
		r.obligations = append(r.obligations, &obligation{
			inv: FailureUnresolved, child: child, due: at.Add(r.sc.maxBackoff() + ShutdownTimeout + r.cfg.Slack),
			what: fmt.Sprintf("failed at %s (%v) and was neither restarted nor taken out of supervision, nor did the manager begin to shut down", stamp(at), e.Err),
			resolved: func() bool {
				return r.startedSince(child, at) || !r.doneAt.IsZero() || !r.shutdownReq.IsZero() || r.stoppedAbove(child) || r.stoppedWithin(child) ||
					r.eventSince(at, func(x cm.Event) bool {
						return x.Type == cm.Escalated ||
							// A child that keeps no journal (a fleet's runner): its
							// restart is its ChildStarted.
							(!journalled && x.Type == cm.ChildStarted && x.Child == child) || (fenced && (x.Type == cm.LeaderLost || x.Type == cm.ShardLost)) || (x.Type == cm.ChildRemoved && within(child, x.Child)) ||
							// The manager began to shut down (a lost lease with
							// Exit, a failed start): nothing is restarted from
							// then on, and how long the end takes is judged by
							// not-ended and done, not here.
							(x.Type == cm.PhaseChanged && x.Phase == cm.PhaseShuttingDown) ||
							// A group above it (or, for a group, the group itself)
							// failed or stopped: that group's failure is the one
							// to resolve now, or it stays stopped (ExhaustedStop).
							(x.Type == cm.ChildFailed && x.Child != child && within(child, x.Child)) ||
							// A member's group counts: the fleet stops it (Offline)
							// with a failed store in it, as it stops one whose
							// Recover ran out of StartTimeout against an API
							// server that is down.
							(x.Type == cm.ChildStopped && (r.isGroup(x.Child) || isMemberGroup(x.Child)) && within(child, x.Child))
					}) || r.waitsInPlan(child, at)
			},
		})
	case cm.Escalated:
		r.obligations = append(r.obligations, &obligation{
			inv: NotEnded, due: e.Time.Add(ShutdownTimeout + r.cfg.Slack + r.releaseAllowance()), releases: e.Time.Add(ShutdownTimeout + r.cfg.Slack),
			what: fmt.Sprintf("escalated at %s (%v) and Done did not close within ShutdownTimeout %s + %s (+ %s for the Lease releases on the slow fake)",
				stamp(e.Time), e.Err, ShutdownTimeout, r.cfg.Slack, r.releaseAllowance()),
			resolved: func() bool { return !r.doneAt.IsZero() },
		})
	case cm.LeaderLost, cm.ShardLost:
		if !r.faulted {
			gap := r.writeGap(e.Time)
			v := Violation{Invariant: RenewableLost, Time: e.Time,
				Detail: fmt.Sprintf("%s at %s (%v) with no partition, Steal or slow-API step before it and every Lease write answered within %s; the longest the server went without a Lease write from this replica in the lease duration before: %s",
					e.Type, stamp(e.Time), e.Err, r.sc.WriteLatency*11/10, gap.Round(time.Millisecond))}
			if gap > FenceBudget/2 {
				// A replica that sent no Lease write at all for that long did
				// not run (the pause watch, one goroutine's timer, misses a
				// process starved of CPU: issue 34); an elector that lets a
				// held Lease lapse while it writes others is not excused.
				r.excuseOnce(string(RenewableLost), v)
			} else {
				r.violateOnce(string(RenewableLost), v, true) // a paused process is an excuse
			}
		}
		if r.sc.Election == Exit && r.shutdownReq.IsZero() {
			r.obligations = append(r.obligations, &obligation{
				inv: NotEnded, due: e.Time.Add(FenceTimeout + r.cfg.Slack + r.releaseAllowance()), releases: e.Time.Add(FenceTimeout + r.cfg.Slack),
				what: fmt.Sprintf("lost the lease at %s with OnLeaseLost Exit and Done did not close within the fence timeout %s + %s (+ %s for the Lease releases on the slow fake)",
					stamp(e.Time), FenceTimeout, r.cfg.Slack, r.releaseAllowance()),
				resolved: func() bool { return !r.doneAt.IsZero() },
			})
		}
	}
}

// releaseAllowance is the time a manager ending now may take, beyond its
// bound, to hand its Leases back while a SlowAPI step holds every Lease
// call for its latency: client-go's fake clientset runs one call at a time
// (its Invokes holds a lock across the reactors) and the slow reactor
// cannot see a call's context, so each release waits behind the calls in
// flight (a renewal and a release per shard, and the member Lease's) and
// outlives the elector's bound on it (RenewDeadline), which a real API
// server honours. Zero without a slow API.
func (r *runner) releaseAllowance() time.Duration {
	d := time.Duration(r.latency.Load())
	if d <= 0 {
		return 0
	}
	return time.Duration(2*(max(r.sc.Shards, 1)+1)) * d
}

// slowedEnds gives each manager's end already owed (NotEnded) the
// allowance of a SlowAPI step taken now: its Leases are released after
// its children have stopped, behind the calls the slow fake holds, so the
// allowance counts from the step or from the end's own bound, whichever
// is later. A step during the shutdown broke not-ended with the allowance
// of the latency before it (none): 1 of 72 sequences.
func (r *runner) slowedEnds(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	allowance := r.releaseAllowance()
	for _, o := range r.obligations {
		if o.releases.IsZero() {
			continue
		}
		from := o.releases
		if now.Add(r.cfg.Slack).After(from) {
			from = now.Add(r.cfg.Slack)
		}
		if due := from.Add(allowance); due.After(o.due) {
			o.due = due
			o.what += fmt.Sprintf("; a SlowAPI step at %s moved the bound by %s", stamp(now), allowance)
		}
	}
}

// noteFault records, before it is taken, a step that may cost the lease.
func (r *runner) noteFault(st Step) {
	if st.Do == DoSlowAPI && st.Dur == 0 {
		return
	}
	r.mu.Lock()
	r.faulted = true
	r.mu.Unlock()
}

func stamp(t time.Time) string { return t.Format("05.000") }

// startedSince reports whether child's start call (for a group, one of
// its children's, at any depth) was entered after at. r.mu is held.
func (r *runner) startedSince(child string, at time.Time) bool {
	for path := range r.children {
		if !within(path, child) {
			continue
		}
		for _, in := range r.journal.Of(path) {
			if in.From.After(at) {
				return true
			}
		}
	}
	return false
}

// stoppedAbove reports whether a StopChild or RemoveChild was sent for
// child or a group above it. r.mu is held.
func (r *runner) stoppedAbove(child string) bool {
	for _, p := range ancestry(child) {
		if r.stopReq[p] {
			return true
		}
	}
	return false
}

// isMemberGroup reports whether path is a fleet member's group
// ("fleet/c0").
func isMemberGroup(path string) bool {
	return fleetMember(path) != "" && !strings.Contains(strings.TrimPrefix(path, fleetName+"/"), "/")
}

// stoppedWithin reports whether every child under group (a group's path)
// was stopped or removed on request: a failed group whose restart then
// has nothing left to start (its one child stopped while the restart
// backed off) is out of supervision as surely as a stopped group. It
// reads stopReq as stoppedAbove does. r.mu is held.
func (r *runner) stoppedWithin(group string) bool {
	n := 0
	for path := range r.children {
		if path == group || !within(path, group) {
			continue
		}
		if !r.stoppedAbove(path) {
			return false
		}
		n++
	}
	return n > 0
}

// eventSince reports whether an event at or after at satisfies match.
// The events are in the order they were delivered, not in the order of
// their times: each publisher stamps its event before it publishes it
// (the fleet's ClusterEngaged, stamped in engage, may come after a
// group's ChildFailed stamped later by the supervisor), so an event
// stamped before at says nothing of those delivered before it, and every
// event is read. r.mu is held.
func (r *runner) eventSince(at time.Time, match func(cm.Event) bool) bool {
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; !e.Time.Before(at) && match(e) {
			return true
		}
	}
	return false
}

// writeGap is the longest time, in the lease duration up to at, in which
// the fake API server received no Lease write from this replica.
func (r *runner) writeGap(at time.Time) time.Duration {
	if r.srv == nil {
		return 0
	}
	since := at.Add(-LeaseDuration)
	last, gap := since, time.Duration(0)
	for _, w := range r.srv.History() {
		if w.Client != identity || w.Time.Before(since) || w.Time.After(at) {
			continue
		}
		gap = max(gap, w.Time.Sub(last))
		last = w.Time
	}
	return max(gap, at.Sub(last))
}
