package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// stats are the harness's counters; every field is safe to update from any
// goroutine.
type stats struct {
	injected [numFaultKinds]atomic.Int64 // faults set up (a report is injected and struck at once)
	struck   [numFaultKinds]atomic.Int64 // faults that produced their error or panic
	counted  [numFaultKinds]atomic.Int64 // ChildFailed events naming a fault of that kind

	restarts, failures, started, stopped, unhealthy, escalations, unstopped    atomic.Int64
	unhealthyFailures, silentFailures, unexplainedSilences, slowHandleFailures atomic.Int64
	shutdownPanics                                                             atomic.Int64

	mustRegistered, mustResolved, mustTouched atomic.Int64
	overlappingStarts                         atomic.Int64

	lifecycle       [numOps]atomic.Int64 // requests sent
	lifecycleErrors [numOps]atomic.Int64 // answered with an error (an allowed one)
	lifecycleSkips  atomic.Int64         // not sent: too many in flight

	admission [6]atomic.Int64 // answers: 200, 404, 429, 503, other, transport errors

	healthCalls, healthMax, statusCalls, scrapes atomic.Int64 // healthMax: ns
}

// The lifecycle operations.
const (
	opStatus = iota
	opRestart
	opStop
	opStart
	opAdd
	opRemove
	numOps
)

var opNames = [numOps]string{"GetStatus", "RestartChild", "StopChild", "StartChild", "AddChild", "RemoveChild"}

// Snapshot is the harness's counters at one moment.
type Snapshot struct {
	Time                 time.Time
	Children             int              // in the manager
	Injected             map[string]int64 // faults set up, by kind
	Struck               map[string]int64 // faults that produced their error or panic, by kind
	Counted              map[string]int64 // failures the supervisor counted, by fault kind
	Restarts, Failures   int64            // ChildRestarted, ChildFailed events
	Started, Stopped     int64            // ChildStarted, ChildStopped events
	Unhealthy            int64            // ChildUnhealthy events
	UnhealthyFailures    int64            // failures from unhealthy answers
	SilentFailures       int64            // failures from hung health answers
	UnexplainedSilences  int64            // failures from silent probes of children not made to hang (load)
	SlowHandleFailures   int64            // webhook failures from Handle calls past their deadline
	ShutdownPanics       int64            // ChildStopped events carrying a panic
	Escalations          int64
	Unstopped            int64 // ChildUnstopped events
	MustRegistered       int64 // reported failures that had to be counted
	MustResolved         int64 // ... and were
	MustTouched          int64 // ... that a lifecycle message made uncertain
	OverlappingStarts    int64 // start calls begun while the previous incarnation's was still running
	Lifecycle            map[string]int64
	LifecycleErrors      map[string]int64
	LifecycleSkips       int64
	Admission            map[string]int64 // answers by status
	HealthCalls          int64
	HealthMax            time.Duration // the slowest GetHealth
	StatusCalls, Scrapes int64
	Violations           int
}

// Snapshot returns the counters now.
func (h *Harness) Snapshot() Snapshot {
	s := &h.stats
	byKind := func(a *[numFaultKinds]atomic.Int64) map[string]int64 {
		m := map[string]int64{}
		for k := FaultKind(1); k < numFaultKinds; k++ {
			if v := a[k].Load(); v != 0 {
				m[k.String()] = v
			}
		}
		return m
	}
	byOp := func(a *[numOps]atomic.Int64) map[string]int64 {
		m := map[string]int64{}
		for i, n := range opNames {
			if v := a[i].Load(); v != 0 {
				m[n] = v
			}
		}
		return m
	}
	h.mu.Lock()
	children := len(h.live)
	h.mu.Unlock()
	_, violations := h.Violations()
	adm := map[string]int64{}
	for i, n := range []string{"200", "404", "429", "503", "other", "transport"} {
		if v := s.admission[i].Load(); v != 0 {
			adm[n] = v
		}
	}
	return Snapshot{
		Time: time.Now(), Children: children,
		Injected: byKind(&s.injected), Struck: byKind(&s.struck), Counted: byKind(&s.counted),
		Restarts: s.restarts.Load(), Failures: s.failures.Load(), Started: s.started.Load(), Stopped: s.stopped.Load(),
		Unhealthy: s.unhealthy.Load(), UnhealthyFailures: s.unhealthyFailures.Load(), SilentFailures: s.silentFailures.Load(),
		UnexplainedSilences: s.unexplainedSilences.Load(), SlowHandleFailures: s.slowHandleFailures.Load(),
		ShutdownPanics: s.shutdownPanics.Load(), Escalations: s.escalations.Load(), Unstopped: s.unstopped.Load(),
		MustRegistered: s.mustRegistered.Load(), MustResolved: s.mustResolved.Load(), MustTouched: s.mustTouched.Load(),
		OverlappingStarts: s.overlappingStarts.Load(),
		Lifecycle:         byOp(&s.lifecycle), LifecycleErrors: byOp(&s.lifecycleErrors), LifecycleSkips: s.lifecycleSkips.Load(),
		Admission: adm, HealthCalls: s.healthCalls.Load(), HealthMax: time.Duration(s.healthMax.Load()),
		StatusCalls: s.statusCalls.Load(), Scrapes: s.scrapes.Load(), Violations: violations,
	}
}

// String is a summary of the snapshot, a few lines long.
func (s Snapshot) String() string {
	var b strings.Builder
	sum := func(m map[string]int64) int64 {
		var n int64
		for _, v := range m {
			n += v
		}
		return n
	}
	fmt.Fprintf(&b, "children %d; faults injected %d, struck %d; failures %d (unhealthy %d, silent %d, unexplained silent %d, slow Handle %d), restarts %d, escalations %d\n",
		s.Children, sum(s.Injected), sum(s.Struck), s.Failures, s.UnhealthyFailures, s.SilentFailures, s.UnexplainedSilences,
		s.SlowHandleFailures, s.Restarts, s.Escalations)
	fmt.Fprintf(&b, "  injected by kind: %s\n  struck by kind: %s\n  counted by kind: %s\n", mapString(s.Injected), mapString(s.Struck), mapString(s.Counted))
	fmt.Fprintf(&b, "  reported failures that had to be counted: %d, counted: %d, made uncertain by a lifecycle message: %d; overlapping start calls: %d; Shutdown panics: %d\n",
		s.MustRegistered, s.MustResolved, s.MustTouched, s.OverlappingStarts, s.ShutdownPanics)
	fmt.Fprintf(&b, "  lifecycle: %s (errors %s, skipped %d)\n", mapString(s.Lifecycle), mapString(s.LifecycleErrors), s.LifecycleSkips)
	fmt.Fprintf(&b, "  admission answers: %s; GetHealth calls %d (slowest %s); violations %d",
		mapString(s.Admission), s.HealthCalls, s.HealthMax.Round(time.Millisecond), s.Violations)
	return b.String()
}

func mapString(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
