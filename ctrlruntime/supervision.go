package ctrlruntime

import (
	"context"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
)

// ReconcilePanicError is a panic in a reconcile, recovered by the reconciler's
// host. At TypedOptions.PanicThreshold, when positive (1 with RecoverPanic
// false), it is the failure the reconciler reports to the supervisor.
type ReconcilePanicError struct {
	Controller string // the reconciler's name
	Request    string // the request being reconciled, as %v prints it
	Value      any    // what was passed to panic
	Stack      []byte // the stack of the panicking goroutine
	Panics     int    // panics of this incarnation so far, this one included
	at         time.Time
}

// Error names the reconciler, the request and the panic value.
func (e *ReconcilePanicError) Error() string {
	return fmt.Sprintf("ctrlruntime: reconciler %q: reconcile of %s panicked (%d in this incarnation): %v", e.Controller, e.Request, e.Panics, e.Value)
}

// Unwrap returns the panic as a controllermanager.PanicError of the
// reconciler's child (so that the manager counts it in
// controllermanager_child_panics_total when it fails the child), and the
// panic value when it is an error.
func (e *ReconcilePanicError) Unwrap() []error {
	errs := []error{&cm.PanicError{Child: e.Controller, Kind: actors.KindController, Op: "Reconcile", Value: e.Value, Stack: e.Stack}}
	if err, ok := e.Value.(error); ok {
		errs = append(errs, err)
	}
	return errs
}

// maxOutcomes bounds the reconcile outcomes kept for the error rate: a
// reconciler ending more than that many within ErrorRateWindow is judged
// on the most recent ones.
const maxOutcomes = 1024

type outcome struct {
	at     time.Time
	req    string // the request, as %v prints it
	failed bool
}

// supervised wraps one incarnation's reconciler: it recovers panics, times
// every reconcile and keeps the recent outcomes, for GetHealth and for the
// failure report at the panic threshold (PanicThreshold, when positive).
type supervised[request comparable] struct {
	name   string
	inner  reconcile.TypedReconciler[request]
	opts   TypedOptions[request]
	report func(error)
	// repanic passes a panic on, once counted, to the controller-runtime
	// controller that hosts the reconcile, which counts it in
	// controller_runtime_reconcile_panics_total, logs "Observed a panic"
	// with its stack and retries the request; false: the panic is returned
	// as a *ReconcilePanicError.
	repanic bool
	// busy, when set, keeps two incarnations from reconciling one key at
	// once.
	busy *busyKeys[request]

	mu       sync.Mutex
	nextID   uint64
	inFlight map[uint64]running
	outcomes []outcome // a ring of at most maxOutcomes, oldest at head
	head     int
	total    int
	errors   int
	panics   int
	lastErr  error
	// lastPanic is the last panic recovered in this incarnation, for the
	// health message: a recovered panic fails no child, so no supervision
	// event or controllermanager_* metric tells of it.
	lastPanic *ReconcilePanicError
}

type running struct {
	req   string
	since time.Time
}

func newSupervised[request comparable](name string, inner reconcile.TypedReconciler[request], opts TypedOptions[request], report func(error)) *supervised[request] {
	return &supervised[request]{name: name, inner: inner, opts: opts, report: report, inFlight: map[uint64]running{}}
}

// Reconcile calls the user's reconciler; a panic becomes an error (the
// request is retried with backoff), and at a positive PanicThreshold a
// failure report.
func (s *supervised[request]) Reconcile(ctx context.Context, req request) (res reconcile.Result, err error) {
	if s.busy != nil {
		if !s.busy.enter(req) {
			// An earlier incarnation's reconcile of req has not returned.
			return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
		}
		defer s.busy.leave(req)
	}
	key := fmt.Sprint(req)
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.inFlight[id] = running{req: key, since: s.opts.Clock.Now()}
	s.mu.Unlock()
	defer func() {
		v := recover()
		if v == nil {
			s.end(id, key, err, nil)
			return
		}
		perr := &ReconcilePanicError{Controller: s.name, Request: key, Value: v, Stack: debug.Stack(), at: s.opts.Clock.Now()}
		s.end(id, key, perr, perr)
		if s.repanic {
			panic(v)
		}
		res, err = reconcile.Result{}, perr
	}()
	return s.inner.Reconcile(ctx, req)
}

func (s *supervised[request]) end(id uint64, key string, err error, perr *ReconcilePanicError) {
	s.mu.Lock()
	delete(s.inFlight, id)
	o := outcome{at: s.opts.Clock.Now(), req: key, failed: err != nil}
	if len(s.outcomes) < maxOutcomes {
		s.outcomes = append(s.outcomes, o)
	} else {
		s.outcomes[s.head] = o
		s.head = (s.head + 1) % maxOutcomes
	}
	s.total++
	if err != nil {
		s.errors++
		s.lastErr = err
	}
	var reportIt bool
	if perr != nil {
		s.panics++
		perr.Panics = s.panics
		s.lastPanic = perr
		reportIt = s.opts.PanicThreshold > 0 && s.panics == s.opts.PanicThreshold
	}
	s.mu.Unlock()
	if reportIt {
		s.report(perr)
	}
}

// problems lists why the reconciler is unhealthy now (empty: healthy) and
// a summary of this incarnation for the health message.
func (s *supervised[request]) problems() (problems []string, summary string) {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.StuckAfter > 0 {
		var stuck []running
		for _, r := range s.inFlight {
			if now.Sub(r.since) >= s.opts.StuckAfter {
				stuck = append(stuck, r)
			}
		}
		sort.Slice(stuck, func(i, j int) bool { return stuck[i].since.Before(stuck[j].since) })
		for _, r := range stuck {
			problems = append(problems, fmt.Sprintf("reconcile of %s stuck: running for %s, past the %s deadline", r.req, now.Sub(r.since).Round(time.Millisecond), s.opts.StuckAfter))
		}
	}
	if s.opts.ErrorRateThreshold > 0 {
		// Each request counts once, by its last outcome in the window: a
		// request retried with backoff after every failure is one failing
		// request, not many failed reconciles.
		since := now.Add(-s.opts.ErrorRateWindow)
		last := map[string]bool{}
		for i := range s.outcomes {
			o := s.outcomes[(s.head+i)%len(s.outcomes)] // oldest first
			if o.at.After(since) {
				last[o.req] = o.failed
			}
		}
		n, failed := len(last), 0
		for _, f := range last {
			if f {
				failed++
			}
		}
		if n >= s.opts.ErrorRateMinReconciles && float64(failed) >= s.opts.ErrorRateThreshold*float64(n) {
			problems = append(problems, fmt.Sprintf("error rate %d%%: %d of the %d requests reconciled in the last %s failed their last reconcile, the last with: %v",
				100*failed/n, failed, n, s.opts.ErrorRateWindow, s.lastErr))
		}
	}
	summary = fmt.Sprintf("%d reconciles, %d failed, %d panicked, %d running", s.total, s.errors, s.panics, len(s.inFlight))
	if p := s.lastPanic; p != nil {
		summary += fmt.Sprintf("; the last panic %s ago, reconciling %s: %v", now.Sub(p.at).Round(time.Second), p.Request, p.Value)
	}
	return problems, summary
}

// running lists the requests being reconciled, each with how long it has
// run.
func (s *supervised[request]) running() []string {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.inFlight))
	for _, r := range s.inFlight {
		out = append(out, fmt.Sprintf("%s (for %s)", r.req, now.Sub(r.since).Round(time.Millisecond)))
	}
	sort.Strings(out)
	return out
}

// counts returns the reconciles ended, failed and panicked so far.
func (s *supervised[request]) counts() (total, failed, panics int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.errors, s.panics
}

func joinProblems(p []string) string { return strings.Join(p, "; ") }
