package statespace

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/pausewatch"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The manager's timing in every sequence: short, so that a sequence takes
// milliseconds, except where the lease's real seconds are needed.
const (
	LeaseDuration      = 2 * time.Second
	RenewDeadline      = time.Second
	RetryPeriod        = 100 * time.Millisecond
	FenceBudget        = LeaseDuration - RenewDeadline - RetryPeriod
	FenceTimeout       = FenceBudget * 4 / 5
	MaxRestarts        = 3
	RestartWindow      = 2 * time.Second
	InitialBackoff     = 10 * time.Millisecond
	MaxBackoff         = 80 * time.Millisecond
	HealthInterval     = 25 * time.Millisecond
	HealthTimeout      = 250 * time.Millisecond
	UnhealthyThreshold = 2
	ShutdownTimeout    = 300 * time.Millisecond

	identity  = "replica"
	thief     = "thief"
	editor    = "editor" // the client that edits Leases (DoAnnotateLease …)
	namespace = "ns"
	leaseName = "statespace"
)

// Config holds the bounds of the checks.
type Config struct {
	// Slack is added to every bounded-time invariant's own bound (a
	// backoff, ShutdownTimeout, the fence timeout), for a loaded machine
	// running the race detector. Default 3s.
	Slack time.Duration
	// Logger is the manager's; nil discards its logs.
	Logger *slog.Logger
}

// Run drives a fresh manager through sc and checks every invariant after
// every step, then heals it (hung calls released, network back), shuts it
// down and checks the end. It returns once every goroutine it started has
// returned, or, when the manager does not stop, reports that.
func Run(ctx context.Context, sc Scenario, cfg Config) Result {
	if cfg.Slack <= 0 {
		cfg.Slack = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := newRunner(sc, cfg)
	defer r.pauses.Stop()
	begin := time.Now()
	r.run(ctx)
	if r.fleet != nil {
		r.fleet.close()
	}
	res := Result{Scenario: sc, Steps: r.steps, Skipped: r.skipped, Took: time.Since(begin), MaxPause: r.pauses.Longest()}
	r.vmu.Lock()
	res.Violations, res.Excused = slices.Clone(r.violations), slices.Clone(r.excused)
	r.vmu.Unlock()
	r.mu.Lock()
	res.Log = slices.Clone(r.log)
	res.Answers, res.Reelect = r.judged, r.reelectJudged
	res.Dropped = int(r.dropped.Load())
	res.ListsHeld = int(r.listsHung.held.Load())
	res.GroupProbes = int(r.groupProbes.Load())
	res.Handled = r.journal.Handled()
	for _, e := range r.events {
		if e.Err == nil || !strings.Contains(e.Err.Error(), "Shutdown did not return") || !strings.Contains(e.Err.Error(), "during a restart") {
			continue
		}
		switch {
		case e.Type == cm.ChildFailed && r.isGroup(e.Child):
			res.HungContained++
		case e.Type == cm.Escalated:
			res.HungEscalated++
		}
	}
	r.mu.Unlock()
	if f := r.fleet; f != nil {
		f.mu.Lock()
		for _, bs := range f.builds {
			res.FleetBuilds += len(bs)
		}
		res.FleetOffline, res.FleetDisengaged, res.ClustersEnded = f.offlineJudged, f.disengagedJudged, f.endedJudged
		f.mu.Unlock()
		r.mu.Lock()
		res.FleetOutages, res.FleetOnlineDown, res.FleetOnline, res.FleetRestarted = f.lateJudged, f.onlineDownJudged, f.earlyJudged, f.outageJudged
		r.mu.Unlock()
	}
	return res
}

type runner struct {
	sc      Scenario
	cfg     Config
	begin   time.Time
	journal *Journal
	release chan struct{}
	srv     *leasetest.Server
	client  *leasetest.Client
	latency atomic.Int64
	// groupProbes: unhealthy children judged at a group's own health
	// timing (Result.GroupProbes).
	groupProbes atomic.Int32
	// stalled: the replica's Lease watches deliver nothing (DoStallWatch).
	stalled atomic.Bool
	dropped atomic.Int64 // watch events the stalls dropped
	// listsHung: the replica's Lease lists wait (DoHangList).
	listsHung gate
	// faulted: a partition, Steal or slow-API step has been taken; guarded
	// by mu.
	faulted bool
	// started: a Start step was taken; startedOK: its Start returned nil
	// (not-reelected judges an end by itself only of a manager that
	// started); stealUntil: when the last Steal's Lease expires, by its
	// own duration. Guarded by mu.
	started, startedOK bool
	stealUntil         time.Time
	m                  *cm.ControllerManager
	pauses             *pausewatch.Watch
	fleet              *fleetState // a fleet sequence's (WithFleet), or nil

	startCancel context.CancelFunc
	startDone   chan error
	background  sync.WaitGroup
	doneWatch   chan struct{}
	// admissionStop ends the admission clients (startAdmission).
	admissionStop chan struct{}

	mu          sync.Mutex
	children    map[string]*child
	added       int
	events      []cm.Event
	phase       cm.Phase
	phaseCh     chan struct{} // closed at each phase change
	obligations []*obligation
	stopReq     map[string]bool
	reqs        []lifecycleReq // the lifecycle steps sent, in order
	stopsDone   []stopDone     // the StopChild and RemoveChild answered nil
	startsDone  []stopDone     // the StartChild and RestartChild answered
	answers     []answer       // lifecycle calls answered nil, not yet judged (checkAnswers)
	judged      int            // answers judged
	// reelectJudged: checkReelected judged this sequence.
	reelectJudged bool
	order         map[string][]string  // each level's children (names) in the order added; "" is the root
	addedAt       map[string]time.Time // when each child added by a step was sent
	lastSeen      map[string]seenState // each child's state in the last Status checked
	shutdownReq   time.Time            // the first ShutdownAndWait or cancelled Start
	unheldSince   time.Time            // the first Status, of those in a row, Running while holding nothing (checkHeld)
	exitAt        time.Time            // the first moment the host would exit: Done, or a ShutdownAndWait returned
	doneAt        time.Time
	knobGen       map[string]int
	log           []string
	steps         int
	skipped       int

	vmu        sync.Mutex
	violations []Violation
	excused    []Violation
	seen       map[string]bool
}

// obligation is a bounded-time invariant waiting to be met.
type obligation struct {
	inv      Invariant
	child    string
	due      time.Time
	what     string
	resolved func() bool // called with r.mu held
	key      string      // deduplicates
	// pauseExcuses, when positive: a pause of the whole process longer
	// than that excuses it (logged, not failed), as it stalls the
	// manager's timers and probes while the bound's clock runs on.
	pauseExcuses time.Duration
	// more, if set, adds to what once it is overdue (r.mu not held).
	more func() string
	// releases, when set, is the due time without releaseAllowance, for a
	// manager's end: a SlowAPI step taken after it was made (the Leases
	// still to be released) moves due to this plus the allowance, counted
	// from the step if that is later (slowedEnds).
	releases time.Time
}

func newRunner(sc Scenario, cfg Config) *runner {
	r := &runner{
		sc: sc, cfg: cfg, begin: time.Now(), release: make(chan struct{}),
		children: map[string]*child{}, phase: cm.PhaseIdle, phaseCh: make(chan struct{}),
		stopReq: map[string]bool{}, order: map[string][]string{}, addedAt: map[string]time.Time{}, lastSeen: map[string]seenState{}, knobGen: map[string]int{}, seen: map[string]bool{},
		startDone: make(chan error, 1), doneWatch: make(chan struct{}), admissionStop: make(chan struct{}),
	}
	r.journal = NewJournal(r.violate)
	r.pauses = pausewatch.Start()
	return r
}

func (r *runner) logf(format string, args ...any) {
	r.mu.Lock()
	r.logLocked(format, args...)
	r.mu.Unlock()
}

func (r *runner) logLocked(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf("%7.3fs ", time.Since(r.begin).Seconds())+fmt.Sprintf(format, args...))
}

func (r *runner) violate(v Violation) {
	key := string(v.Invariant) + "/" + v.Child + "/" + v.Detail
	r.vmu.Lock()
	defer r.vmu.Unlock()
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	r.violations = append(r.violations, v)
}

// excuseOnce records v as excused, once per key.
func (r *runner) excuseOnce(key string, v Violation) {
	r.vmu.Lock()
	defer r.vmu.Unlock()
	if !r.seen[key] {
		r.seen[key] = true
		r.excused = append(r.excused, v)
	}
}

// violateOnce reports v once per key.
func (r *runner) violateOnce(key string, v Violation, excusable bool) {
	r.vmu.Lock()
	defer r.vmu.Unlock()
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	if excusable && r.pauses.Longest() > FenceBudget/2 {
		r.excused = append(r.excused, v)
		return
	}
	r.violations = append(r.violations, v)
}
