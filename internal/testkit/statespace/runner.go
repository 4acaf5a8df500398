package statespace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
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

// Result is what one sequence did and found.
type Result struct {
	Scenario   Scenario
	Violations []Violation
	// Excused are Unfenced violations that a pause of the whole process
	// longer than half the fence budget explains (the paused-process limit
	// no lease can fence): logged, not failed.
	Excused  []Violation
	Steps    int // steps run
	Skipped  int // steps whose phase did not come
	Took     time.Duration
	MaxPause time.Duration
	Log      []string // what each step did, and the manager's events
}

// Failed reports whether the sequence broke an invariant.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Report is the whole story of a failed sequence: the scenario, what
// happened and what broke.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s: %s\n", r.Scenario.Name, r.Scenario)
	fmt.Fprintf(&b, "ran %d steps (%d skipped) in %s; longest process pause %s\n", r.Steps, r.Skipped, r.Took.Round(time.Millisecond), r.MaxPause.Round(time.Millisecond))
	b.WriteString("what happened:\n")
	for _, l := range r.Log {
		b.WriteString("  " + l + "\n")
	}
	for _, v := range r.Excused {
		b.WriteString("excused (process paused): " + v.String() + "\n")
	}
	for _, v := range r.Violations {
		b.WriteString("VIOLATION " + v.String() + "\n")
	}
	return b.String()
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
	defer r.pauses.stop()
	begin := time.Now()
	r.run(ctx)
	res := Result{Scenario: sc, Steps: r.steps, Skipped: r.skipped, Took: time.Since(begin), MaxPause: r.pauses.max()}
	r.vmu.Lock()
	res.Violations, res.Excused = slices.Clone(r.violations), slices.Clone(r.excused)
	r.vmu.Unlock()
	r.mu.Lock()
	res.Log = slices.Clone(r.log)
	r.mu.Unlock()
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
	// faulted: a partition, Steal or slow-API step has been taken; guarded
	// by mu.
	faulted bool
	m       *cm.ControllerManager
	pauses  *pauseWatch

	startCancel context.CancelFunc
	startDone   chan error
	background  sync.WaitGroup
	doneWatch   chan struct{}

	mu          sync.Mutex
	children    map[string]*child
	added       int
	events      []cm.Event
	phase       cm.Phase
	phaseCh     chan struct{} // closed at each phase change
	obligations []*obligation
	stopReq     map[string]bool
	shutdownReq time.Time // the first ShutdownAndWait or cancelled Start
	exitAt      time.Time // the first moment the host would exit: Done, or a ShutdownAndWait returned
	doneAt      time.Time
	knobGen     map[string]int
	log         []string
	steps       int
	skipped     int

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
}

func newRunner(sc Scenario, cfg Config) *runner {
	r := &runner{
		sc: sc, cfg: cfg, begin: time.Now(), release: make(chan struct{}),
		children: map[string]*child{}, phase: cm.PhaseIdle, phaseCh: make(chan struct{}),
		stopReq: map[string]bool{}, knobGen: map[string]int{}, seen: map[string]bool{},
		startDone: make(chan error, 1), doneWatch: make(chan struct{}),
	}
	r.journal = NewJournal(r.violate)
	r.pauses = newPauseWatch()
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

// violateOnce reports v once per key.
func (r *runner) violateOnce(key string, v Violation, excusable bool) {
	r.vmu.Lock()
	defer r.vmu.Unlock()
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	if excusable && r.pauses.max() > FenceBudget/2 {
		r.excused = append(r.excused, v)
		return
	}
	r.violations = append(r.violations, v)
}

func (r *runner) build() error {
	spec := cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
		Strategy: r.sc.Strategy, MaxRestarts: MaxRestarts, RestartWindow: metav1.Duration{Duration: RestartWindow},
		InitialBackoff: metav1.Duration{Duration: r.sc.initialBackoff()}, MaxBackoff: metav1.Duration{Duration: r.sc.maxBackoff()},
		HealthInterval: metav1.Duration{Duration: HealthInterval}, HealthTimeout: metav1.Duration{Duration: HealthTimeout},
		UnhealthyThreshold: UnhealthyThreshold, ShutdownTimeout: metav1.Duration{Duration: ShutdownTimeout},
	}}
	var kube kubernetes.Interface
	if r.sc.Election != ElectionOff {
		yes := true
		spec.LeaderElection = &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: leaseName, LeaseNamespace: namespace,
			LeaseDuration: metav1.Duration{Duration: LeaseDuration}, RenewDeadline: metav1.Duration{Duration: RenewDeadline},
			RetryPeriod: metav1.Duration{Duration: RetryPeriod}, OnLeaseLost: cm.LeaseLostAction(r.sc.Election),
			Shards: int32(r.sc.Shards),
		}
		r.srv = leasetest.NewServer()
		r.client = r.srv.Client(identity)
		// Slow API: every lease call waits first, then goes on to the fake
		// server's own reactor.
		r.client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if d := time.Duration(r.latency.Load()); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-r.release:
				}
				timer.Stop()
			}
			return false, nil, nil
		})
		if d := r.sc.WriteLatency; d > 0 {
			r.client.SetLatency(leasetest.Latency{Verbs: map[string]time.Duration{"create": d, "update": d}, Jitter: d / 10})
		}
		kube = r.client
	}
	m, err := cm.NewControllerManager(preflight{kube: kube, delay: r.sc.PreflightDelay, release: r.release}, spec, "",
		cm.WithIdentity(identity), cm.WithLogger(r.cfg.Logger), cm.WithEventBuffer(1<<16))
	if err != nil {
		return err
	}
	r.m = m
	m.Subscribe(r.onEvent)
	go func() {
		select {
		case <-m.Done():
			r.mu.Lock()
			r.doneAt = time.Now()
			if r.exitAt.IsZero() {
				r.exitAt = r.doneAt
			}
			r.mu.Unlock()
		case <-r.doneWatch:
		}
	}()
	stores, ctrls, hooks := r.sc.names()
	for _, name := range stores {
		c := newChild(name, "store", r.journal, r.release)
		r.children[name] = c
		m.AddStore(Store{c})
	}
	for _, name := range ctrls {
		c := newChild(name, "controller", r.journal, r.release)
		r.children[name] = c
		m.Add(Controller{c})
	}
	for _, name := range hooks {
		c := newChild(name, "webhook", r.journal, r.release)
		r.children[name] = c
		m.Add(Webhook{c})
	}
	return nil
}

// preflight is the manager's Context: its Start takes delay.
type preflight struct {
	kube    kubernetes.Interface
	delay   time.Duration
	release <-chan struct{}
}

func (p preflight) Start(ctx context.Context) error {
	if p.delay <= 0 {
		return nil
	}
	timer := time.NewTimer(p.delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.release:
	}
	return nil
}

func (p preflight) Kubernetes() kubernetes.Interface { return p.kube }

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
		r.obligations = append(r.obligations, &obligation{
			inv: FailureUnresolved, child: child, due: at.Add(r.sc.maxBackoff() + ShutdownTimeout + r.cfg.Slack),
			what: fmt.Sprintf("failed at %s (%v) and was neither restarted nor taken out of supervision, nor did the manager end", stamp(at), e.Err),
			resolved: func() bool {
				return r.startedSince(child, at) || !r.doneAt.IsZero() || !r.shutdownReq.IsZero() || r.stopReq[child] ||
					r.eventSince(at, func(x cm.Event) bool {
						return x.Type == cm.Escalated || (fenced && (x.Type == cm.LeaderLost || x.Type == cm.ShardLost)) || (x.Type == cm.ChildRemoved && x.Child == child)
					}) || r.waitsInPlan(child, at)
			},
		})
	case cm.Escalated:
		r.obligations = append(r.obligations, &obligation{
			inv: NotEnded, due: e.Time.Add(ShutdownTimeout + r.cfg.Slack),
			what:     fmt.Sprintf("escalated at %s (%v) and Done did not close within ShutdownTimeout %s + %s", stamp(e.Time), e.Err, ShutdownTimeout, r.cfg.Slack),
			resolved: func() bool { return !r.doneAt.IsZero() },
		})
	case cm.LeaderLost, cm.ShardLost:
		if !r.faulted {
			v := Violation{Invariant: RenewableLost, Time: e.Time,
				Detail: fmt.Sprintf("%s at %s (%v) with no partition, Steal or slow-API step before it and every Lease write answered within %s", e.Type, stamp(e.Time), e.Err, r.sc.WriteLatency*11/10)}
			r.violateOnce(string(RenewableLost), v, true) // a paused process is an excuse
		}
		if r.sc.Election == Exit && r.shutdownReq.IsZero() {
			r.obligations = append(r.obligations, &obligation{
				inv: NotEnded, due: e.Time.Add(FenceTimeout + r.cfg.Slack),
				what:     fmt.Sprintf("lost the lease at %s with OnLeaseLost Exit and Done did not close within the fence timeout %s + %s", stamp(e.Time), FenceTimeout, r.cfg.Slack),
				resolved: func() bool { return !r.doneAt.IsZero() },
			})
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

// startedSince reports whether child's start call was entered after at.
func (r *runner) startedSince(child string, at time.Time) bool {
	for _, in := range r.journal.Of(child) {
		if in.From.After(at) {
			return true
		}
	}
	return false
}

// eventSince reports whether an event at or after at satisfies match.
// r.mu is held.
func (r *runner) eventSince(at time.Time, match func(cm.Event) bool) bool {
	for i := len(r.events) - 1; i >= 0; i-- {
		e := r.events[i]
		if e.Time.Before(at) {
			return false
		}
		if match(e) {
			return true
		}
	}
	return false
}

func (r *runner) run(ctx context.Context) {
	if err := r.build(); err != nil {
		r.violate(Violation{Invariant: DoneWrong, Detail: "NewControllerManager: " + err.Error()})
		return
	}
	for _, st := range r.sc.Steps {
		if ctx.Err() != nil {
			break
		}
		if st.At != "" && !r.waitPhase(ctx, st.At) {
			r.mu.Lock()
			r.skipped++
			r.logLocked("skip %s (phase %s)", st, r.phase)
			r.mu.Unlock()
			continue
		}
		r.apply(ctx, st)
		r.check(ctx)
	}
	r.settle(ctx)
	r.heal()
	r.finish(ctx)
}

// phaseOrder is the order of the phases in a manager's life.
var phaseOrder = map[cm.Phase]int{
	cm.PhaseIdle: 0, cm.PhaseInitializing: 1, cm.PhaseElecting: 2, cm.PhaseRecovering: 3, cm.PhaseStarting: 4,
	cm.PhaseRunning: 5, cm.PhaseShuttingDown: 6, cm.PhaseStopped: 7, cm.PhaseFailed: 7,
}

// waitPhase waits for the manager to be in phase p: up to 2s while p is
// still ahead, up to 1s when it may come again (a new election round with
// Reelect, a shutdown that was asked for), not at all when it is past.
func (r *runner) waitPhase(ctx context.Context, p cm.Phase) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var expired <-chan time.Time
	for {
		r.mu.Lock()
		cur, ch, shutdown := r.phase, r.phaseCh, !r.shutdownReq.IsZero()
		r.mu.Unlock()
		if cur == p {
			return true
		}
		if cur.Ended() {
			return false
		}
		if timer == nil {
			wait := 2 * time.Second
			if phaseOrder[cur] > phaseOrder[p] {
				again := r.sc.Election == Reelect && phaseOrder[p] >= phaseOrder[cm.PhaseElecting] && phaseOrder[p] <= phaseOrder[cm.PhaseStarting]
				if !again {
					return false
				}
				wait = time.Second
			}
			if p == cm.PhaseShuttingDown && !shutdown {
				wait = 300 * time.Millisecond // an escalation or a lost lease may bring it
			}
			timer = time.NewTimer(wait)
			expired = timer.C
		}
		select {
		case <-ch:
		case <-expired:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (r *runner) apply(ctx context.Context, st Step) {
	r.mu.Lock()
	r.steps++
	r.logLocked("step %s", st)
	c := r.children[st.Child]
	r.mu.Unlock()
	switch st.Do {
	case DoStart:
		startCtx, cancel := context.WithCancel(context.Background())
		r.startCancel = cancel
		r.background.Add(1)
		go func() {
			defer r.background.Done()
			err := r.m.Start(startCtx, r.sc.StartTimeout)
			r.logf("Start returned %v", err)
			r.startDone <- err
		}()
	case DoCancelStart:
		if r.startCancel != nil {
			r.requestShutdown()
			r.startCancel()
		}
	case DoShutdown:
		r.requestShutdown()
		d := st.Dur
		if d <= 0 {
			d = 10 * time.Second
		}
		r.background.Add(1)
		go func() {
			defer r.background.Done()
			sctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			r.m.ShutdownAndWait(sctx)
			r.mu.Lock()
			if r.exitAt.IsZero() {
				r.exitAt = time.Now()
			}
			r.logLocked("ShutdownAndWait(%s) returned; Err %v", d, r.m.Err())
			r.mu.Unlock()
		}()
	case DoRestart:
		r.request(supervisor.RestartChild{Name: st.Child})
	case DoStop:
		r.mu.Lock()
		r.stopReq[st.Child] = true
		r.mu.Unlock()
		r.request(supervisor.StopChild{Name: st.Child})
	case DoStartChild:
		r.request(supervisor.StartChild{Name: st.Child})
	case DoRemove:
		r.mu.Lock()
		r.stopReq[st.Child] = true
		r.mu.Unlock()
		r.request(supervisor.RemoveChild{Name: st.Child})
	case DoAdd:
		r.mu.Lock()
		r.added++
		name := fmt.Sprintf("added-%d", r.added)
		nc := newChild(name, st.Kind, r.journal, r.release)
		nc.knobs = st.Knobs
		r.children[name] = nc
		r.mu.Unlock()
		var v any
		switch st.Kind {
		case "store":
			v = Store{nc}
		case "webhook":
			v = Webhook{nc}
		default:
			v = Controller{nc}
		}
		r.request(supervisor.AddChild{Runnable: v})
	case DoPartition, DoReconnect:
		r.noteFault(st)
		if r.client != nil {
			r.client.Partition(st.Do == DoPartition)
		}
	case DoSteal:
		r.noteFault(st)
		if r.srv != nil {
			d := st.Dur
			if d < time.Second {
				d = time.Second
			}
			if err := r.srv.Steal(namespace, r.shardLease(st.Shard), thief, d); err != nil {
				r.logf("steal: %v", err)
			}
		}
	case DoSlowAPI:
		r.noteFault(st)
		r.latency.Store(int64(st.Dur))
	case DoFail:
		if c != nil && !c.fail(fmt.Errorf("statespace: %s fails", st.Child)) {
			r.logf("fail %s: it has not started", st.Child)
		}
	case DoKnobs:
		if c != nil {
			c.set(func(k *Knobs) { *k = st.Knobs })
			r.noteKnobs(c, st.Knobs)
		}
	case DoWait:
		timer := time.NewTimer(st.Dur)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

func (r *runner) requestShutdown() {
	r.mu.Lock()
	if r.shutdownReq.IsZero() {
		r.shutdownReq = time.Now()
	}
	r.mu.Unlock()
}

// request sends a lifecycle message in the background.
func (r *runner) request(msg any) {
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := r.m.Request(ctx, msg)
		desc := fmt.Sprintf("%T%+v", msg, msg)
		if add, ok := msg.(supervisor.AddChild); ok {
			desc = fmt.Sprintf("AddChild %s", add.Runnable.(interface{ Name() string }).Name())
		}
		r.logf("%s answered %v", desc, err)
	}()
}

// noteKnobs sets up the bounded-time check of a running child made
// unhealthy: it must be found unhealthy (or restarted) soon.
func (r *runner) noteKnobs(c *child, k Knobs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.knobGen[c.name]++
	if !k.Unhealthy && !k.HealthPanics {
		return
	}
	gen := r.knobGen[c.name]
	incs := r.journal.Of(c.name)
	if len(incs) == 0 {
		return
	}
	cur := incs[len(incs)-1]
	if !cur.StartedOK || cur.ShutdownIn {
		return
	}
	probed := r.phase == cm.PhaseRunning
	if c.kind == "webhook" {
		probed = slices.Contains([]cm.Phase{cm.PhaseElecting, cm.PhaseRecovering, cm.PhaseStarting, cm.PhaseRunning}, r.phase)
	}
	if !probed || !r.shutdownReq.IsZero() || c.kind == "store" {
		return
	}
	at, name, inc, kind, phase := time.Now(), c.name, cur.Inc, c.kind, r.phase
	r.obligations = append(r.obligations, &obligation{
		inv: NotProbed, child: name, due: at.Add(HealthInterval*(UnhealthyThreshold+2) + HealthTimeout + r.cfg.Slack),
		what: fmt.Sprintf("a running %s made unhealthy at %s (phase %s) was not found unhealthy, nor restarted", kind, stamp(at), phase),
		resolved: func() bool {
			if r.knobGen[name] != gen || !r.doneAt.IsZero() || !r.shutdownReq.IsZero() || r.stopReq[name] || r.startedSince(name, at) {
				return true
			}
			if kind == "controller" && r.phase != cm.PhaseRunning {
				return true // fenced: it is being shut down
			}
			for _, in := range r.journal.Of(name) {
				if in.Inc == inc && in.ShutdownIn {
					return true
				}
			}
			return r.eventSince(at, func(x cm.Event) bool {
				return x.Child == name && (x.Type == cm.ChildUnhealthy || x.Type == cm.ChildFailed)
			}) || r.eventSince(at, func(x cm.Event) bool { return x.Type == cm.Escalated })
		},
	})
}

// check checks every invariant now: the bounded-time ones due, the
// children's states in Status, the lease.
func (r *runner) check(ctx context.Context) {
	now := time.Now()
	r.checkStates(ctx, now)
	r.checkObligations(now)
	r.checkLease(now)
	r.checkGuards(false)
}

// guardSlack is how long after a Shutdown has returned (as its child
// journals it, just before returning) its incarnation's guard may still
// pass: the guard ends on the same goroutine right after.
const guardSlack = 100 * time.Millisecond

// checkGuards calls every incarnation's lease guard now: one that passes
// must belong to an incarnation whose Shutdown has not returned, and with
// election on, at a moment this replica held the lease the child runs under
// by the fake API server's history. ended: the manager has stopped, and
// every guard must fail.
func (r *runner) checkGuards(ended bool) {
	r.mu.Lock()
	children := make(map[string]*child, len(r.children))
	for name, c := range r.children {
		if c.kind == "controller" || c.kind == "store" {
			children[name] = c
		}
	}
	r.mu.Unlock()
	var history []leasetest.Write
	if r.srv != nil {
		history = r.srv.History()
	}
	for name, c := range children {
		for inc, guard := range c.incGuards() {
			at := time.Now()
			if guard() != nil {
				continue
			}
			key := fmt.Sprintf("guard/%s/%d", name, inc)
			if ended {
				r.violateOnce(key+"/end", Violation{Invariant: GuardPassed, Child: name, Time: at,
					Detail: fmt.Sprintf("incarnation %d's lease guard passed after the manager had stopped", inc)}, false)
				continue
			}
			for _, in := range r.journal.Of(name) {
				if in.Inc == inc && in.ShutdownOut && in.ShutdownEnd.Add(guardSlack).Before(at) {
					r.violateOnce(key+"/shutdown", Violation{Invariant: GuardPassed, Child: name, Time: at,
						Detail: fmt.Sprintf("incarnation %d's lease guard passed at %s, after its Shutdown returned at %s", inc, stamp(at), stamp(in.ShutdownEnd))}, true)
				}
			}
			if r.srv == nil {
				continue
			}
			names := r.leases(name)
			if r.sc.Shards > 1 && c.kind == "store" {
				names = r.leases("store")
			}
			if gap, ok := uncovered(validity(history, names), at, at); ok {
				r.violateOnce(key+"/lease", Violation{Invariant: GuardPassed, Child: name, Time: gap,
					Detail: fmt.Sprintf("incarnation %d's lease guard passed at %s, when this replica did not hold its lease (lease writes: %s)",
						inc, stamp(at), describeHistory(history, at))}, true)
			}
		}
	}
}

func (r *runner) checkObligations(now time.Time) {
	r.mu.Lock()
	var overdue []*obligation
	r.obligations = slices.DeleteFunc(r.obligations, func(o *obligation) bool {
		if o.resolved() {
			return true
		}
		if now.After(o.due) {
			overdue = append(overdue, o)
			return true
		}
		return false
	})
	r.mu.Unlock()
	for _, o := range overdue {
		detail := o.what
		if o.child != "" {
			detail += "; its last calls: " + fmt.Sprint(r.journal.Tail(o.child, 6))
		}
		r.violate(Violation{Invariant: o.inv, Child: o.child, Time: now, Detail: detail})
	}
}

// checkStates looks for children stuck in a state that something should
// end: BackingOff (a timer), Stopping (a Shutdown), Starting (a start
// call), Failed (its handling); each gets an obligation to leave it.
func (r *runner) checkStates(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := r.m.Status(sctx)
	if err != nil {
		if ctx.Err() == nil {
			r.violate(Violation{Invariant: Stuck, Time: now, Detail: "Status did not answer within 5s: " + err.Error()})
		}
		return
	}
	if st.Phase.Ended() {
		return
	}
	for _, cs := range st.Children {
		var bound time.Duration
		switch cs.State {
		case supervisor.StateBackingOff:
			bound = r.sc.maxBackoff() + r.cfg.Slack
		case supervisor.StateStopping, supervisor.StateStarting, supervisor.StateFailed:
			bound = r.cfg.Slack
		default:
			continue
		}
		name, state, since := cs.Name, cs.State, cs.Since
		key := fmt.Sprintf("stuck/%s/%s/%d", name, state, since.UnixNano())
		r.mu.Lock()
		dup := slices.ContainsFunc(r.obligations, func(o *obligation) bool { return o.key == key })
		if !dup {
			r.obligations = append(r.obligations, &obligation{
				inv: Stuck, child: name, key: key, due: since.Add(bound),
				what: fmt.Sprintf("%s since %s (phase %s) with none of its calls running", state, stamp(since), st.Phase),
				resolved: func() bool {
					if !r.doneAt.IsZero() {
						return true
					}
					if state != supervisor.StateBackingOff {
						// Stopping, Starting and Failed are stuck only with no
						// call of the child running, for a second at least.
						if idle, ok := r.journal.Idle(name, time.Now()); !ok || idle < time.Second {
							return true
						}
					}
					if state == supervisor.StateBackingOff && r.sc.Strategy != cm.OneForOne &&
						r.eventSince(since, func(x cm.Event) bool { return x.Type == cm.ChildRestarted && x.Child != name }) {
						// Waiting in an AllForOne or RestForOne plan behind a
						// sibling whose restarts keep failing within its
						// budget: the plan is going on, in order (as OTP's
						// rest_for_one waits for the child before).
						return true
					}
					return !r.stillIn(name, state, since)
				},
			})
		}
		r.mu.Unlock()
	}
}

// waitsInPlan reports whether child, failed at at, is waiting BackingOff in
// an AllForOne or RestForOne plan behind a sibling whose restarts keep
// failing within its budget: the plan is going on, in order (as OTP's
// rest_for_one waits for the child before), as the stuck check excuses
// too. r.mu is held; Status does not take it.
func (r *runner) waitsInPlan(child string, at time.Time) bool {
	if r.sc.Strategy == cm.OneForOne ||
		!r.eventSince(at, func(x cm.Event) bool { return x.Type == cm.ChildRestarted && x.Child != child }) {
		return false
	}
	cs, ok := r.childStatus(child)
	return ok && cs.State == supervisor.StateBackingOff
}

// stillIn asks Status whether name is still in state since since. r.mu is
// held; Status does not take it.
func (r *runner) stillIn(name string, state supervisor.ChildState, since time.Time) bool {
	cs, ok := r.childStatus(name)
	return ok && cs.State == state && cs.Since.Equal(since)
}

// childStatus asks Status for name's entry; ok is false when Status does
// not answer within 5s, the manager has ended, or it has no such child.
func (r *runner) childStatus(name string) (cs supervisor.ChildStatus, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := r.m.Status(ctx)
	if err != nil || st.Phase.Ended() {
		return cs, false
	}
	return st.Child(name)
}

// checkLease checks, from the fake API server's history, that no
// controller or store has been active while this replica did not hold the
// lease, and that the lease was not released while any child was active.
func (r *runner) checkLease(now time.Time) {
	if r.srv == nil {
		return
	}
	history := r.srv.History()
	held := validity(history, r.leases(""))
	heldAny := validity(history, r.leases("store"))
	r.mu.Lock()
	exitAt := r.exitAt
	r.mu.Unlock()
	incs := r.journal.Incarnations()
	for _, in := range incs {
		if in.Kind != "controller" && in.Kind != "store" {
			continue
		}
		to := in.End()
		if to.IsZero() {
			to = now
		}
		if !exitAt.IsZero() && to.After(exitAt) {
			to = exitAt // the host has exited by then
		}
		if to.Before(in.From) {
			continue
		}
		segs := held
		if r.sc.Shards > 1 {
			segs = validity(history, r.leases(in.Child))
			if in.Kind == "store" {
				segs = heldAny // a store runs while some shard is held
			}
		}
		if gap, ok := uncovered(segs, in.From, to); ok {
			r.violateOnce(fmt.Sprintf("unfenced/%s/%d", in.Child, in.Inc), Violation{
				Invariant: Unfenced, Child: in.Child, Time: gap,
				Detail: fmt.Sprintf("incarnation %d active %s–%s, but at %s this replica did not hold the lease (lease writes: %s)",
					in.Inc, stamp(in.From), endStamp(in), stamp(gap), describeHistory(history, gap)),
			}, true)
		}
	}
	for _, w := range history {
		if w.Client != identity || w.Holder != "" {
			continue
		}
		for _, in := range incs {
			if !in.From.Before(w.Time) {
				continue
			}
			if r.sc.Shards > 1 && (in.Kind != "controller" || !r.leases(in.Child)[w.Name]) {
				// With shards a release concerns the shard's controllers;
				// a store outlives the shards handed over while another is
				// held (the Unfenced check covers it).
				continue
			}
			if end := in.End(); end.IsZero() || end.After(w.Time) {
				what := "its Shutdown had not returned"
				if in.StartOpen || in.StartEnd.After(w.Time) {
					what = "its start call had not returned"
				} else if !in.ShutdownIn {
					what = "it had not been shut down"
				}
				r.violateOnce(fmt.Sprintf("released/%s/%d/%s", in.Child, in.Inc, w.Version), Violation{
					Invariant: ReleasedEarly, Child: in.Child, Time: w.Time,
					Detail: fmt.Sprintf("the lease was released at %s while %s incarnation %d (active since %s, ended %s) was active: %s",
						stamp(w.Time), in.Kind, in.Inc, stamp(in.From), endStamp(in), what),
				}, false)
			}
		}
	}
}

func endStamp(in Incarnation) string {
	if end := in.End(); !end.IsZero() {
		return stamp(end)
	}
	return "(still active)"
}

// shardLease names shard i's Lease (the single lease without shards).
func (r *runner) shardLease(i int) string {
	if r.sc.Shards <= 1 {
		return leaseName
	}
	return fmt.Sprintf("%s-%d", leaseName, i)
}

// leases names the Leases that fence child: its shard's for a controller
// (child "store": every shard's, of which one suffices), the single lease
// without shards.
func (r *runner) leases(child string) map[string]bool {
	if r.sc.Shards <= 1 {
		return map[string]bool{leaseName: true}
	}
	r.mu.Lock()
	c := r.children[child]
	r.mu.Unlock()
	if child == "store" || (c != nil && c.kind == "store") {
		names := map[string]bool{}
		for i := range r.sc.Shards {
			names[r.shardLease(i)] = true
		}
		return names
	}
	return map[string]bool{r.shardLease(cm.ShardOf(child, r.sc.Shards)): true}
}

// segment is a time this replica held the lease: from a write of its own
// naming it holder to a lease duration after its last such write, or to
// its release.
type segment struct{ from, to time.Time }

func validity(history []leasetest.Write, names map[string]bool) []segment {
	if len(names) > 1 {
		// Held while any of them is: the union of each one's validity (a
		// release of one ends only its own).
		var all []segment
		for name := range names {
			all = append(all, validity(history, map[string]bool{name: true})...)
		}
		slices.SortFunc(all, func(a, b segment) int { return a.from.Compare(b.from) })
		var union []segment
		for _, sg := range all {
			if n := len(union); n > 0 && !sg.from.After(union[n-1].to) {
				if sg.to.After(union[n-1].to) {
					union[n-1].to = sg.to
				}
				continue
			}
			union = append(union, sg)
		}
		return union
	}
	var segs []segment
	for _, w := range history {
		if w.Client != identity || !names[w.Name] {
			continue
		}
		if w.Holder == "" { // released: held no more
			if n := len(segs); n > 0 && segs[n-1].to.After(w.Time) {
				segs[n-1].to = w.Time
			}
			continue
		}
		if w.Holder != identity {
			continue
		}
		end := w.Time.Add(LeaseDuration)
		if n := len(segs); n > 0 && !w.Time.After(segs[n-1].to) {
			if end.After(segs[n-1].to) {
				segs[n-1].to = end
			}
			continue
		}
		segs = append(segs, segment{from: w.Time, to: end})
	}
	return segs
}

// uncovered returns the first moment of [from, to] outside segs.
func uncovered(segs []segment, from, to time.Time) (time.Time, bool) {
	at := from
	for _, s := range segs {
		if s.to.Before(at) || s.to.Equal(at) {
			continue
		}
		if s.from.After(at) {
			return at, true
		}
		at = s.to
		if at.After(to) {
			return time.Time{}, false
		}
	}
	return at, true
}

func describeHistory(history []leasetest.Write, around time.Time) string {
	var parts []string
	for _, w := range history {
		if w.Time.Before(around.Add(-LeaseDuration-time.Second)) || w.Time.After(around.Add(time.Second)) {
			continue
		}
		holder := w.Holder
		if holder == "" {
			holder = "(released)"
		}
		by := w.Client
		if by == "" {
			by = "Steal"
		}
		parts = append(parts, fmt.Sprintf("%s %s by %s", stamp(w.Time), holder, by))
	}
	if len(parts) > 8 {
		parts = append(parts[:2], append([]string{"…"}, parts[len(parts)-6:]...)...)
	}
	return strings.Join(parts, ", ")
}

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

// heal releases every hung call, reconnects the replica and makes every
// child calm.
func (r *runner) heal() {
	r.logf("heal: hung calls released, network back, children calm")
	close(r.release)
	r.latency.Store(0)
	if r.client != nil {
		r.client.Partition(false)
	}
	r.mu.Lock()
	for _, c := range r.children {
		c.set(func(k *Knobs) { *k = Knobs{} })
	}
	r.mu.Unlock()
}

// finish shuts the manager down and checks how it ended.
func (r *runner) finish(ctx context.Context) {
	defer close(r.doneWatch)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r.m.ShutdownAndWait(sctx)
	cancel()
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

	// No lease guard passes once the manager has stopped.
	r.checkGuards(true)

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
	for _, cs := range final.Children {
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
		if starts := len(r.journal.Of(cs.Name)); elections <= 1 && starts > 0 && starts != cs.Restarts+1 {
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

// pauseWatch measures the longest pause of the whole process: a ticker
// that did not tick.
type pauseWatch struct {
	mu      sync.Mutex
	longest time.Duration
	done    chan struct{}
	exited  chan struct{}
}

func newPauseWatch() *pauseWatch {
	p := &pauseWatch{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		const period = 10 * time.Millisecond
		tick := time.NewTicker(period)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case now := <-tick.C:
				p.mu.Lock()
				p.longest = max(p.longest, now.Sub(last)-period)
				p.mu.Unlock()
				last = now
			case <-p.done:
				return
			}
		}
	}()
	return p
}

func (p *pauseWatch) max() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.longest
}

func (p *pauseWatch) stop() { close(p.done); <-p.exited }
