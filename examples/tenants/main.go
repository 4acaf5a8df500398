// Command tenants runs one supervision group per tenant in a manager that
// has no cluster (election off): a shared store at the root, and for each
// tenant a group of its own store and the reconciler that reads it,
// supervised RestForOne with a small restart budget and OnExhausted Stop.
//
// Once the manager runs, it tells a story in four steps, printing the
// supervision tree (from Status) after each:
//
//  1. started: the shared store, then tenants a, b and c;
//  2. tenant-d is onboarded: its group is added to the running manager;
//  3. tenant-b is offboarded: its group is stopped and removed;
//  4. tenant-c's store crash-loops: every restart fails, the group spends
//     its budget and stops (ExhaustedStop), while tenants a and d keep
//     reconciling: their counters advance.
//
// It then prints the reconcilers' counters every second until -duration
// has passed, or until SIGINT or SIGTERM, and shuts down cleanly (exit
// status 0). The live view of the tree is served
// on -view-addr, on loopback:
//
//	go run ./examples/tenants
//	go run ./examples/tenants -duration 0 &   # until Ctrl-C
//	open http://127.0.0.1:8083/debug/supervision/
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/webhook"
)

func main() {
	viewAddr := flag.String("view-addr", "127.0.0.1:8083", "where to serve the live view of the supervision tree (keep it on loopback)")
	duration := flag.Duration("duration", 3*time.Second, "stop by itself after this long (0: run until SIGINT or SIGTERM)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{viewAddr: *viewAddr, duration: *duration, log: os.Stderr}, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "tenants:", err)
		os.Exit(1)
	}
}

// config is what the flags set.
type config struct {
	viewAddr string        // the live view
	duration time.Duration // the whole run; 0: until ctx ends
	log      io.Writer     // the manager's log (warnings and errors); nil: discarded
}

// tenantSupervision is every tenant group's: a failed store restarts its
// reconciler too (RestForOne: the reconciler was added after it), two
// restarts within a minute, quick backoffs, and a tenant that spends its
// budget stops alone instead of failing to the manager.
var tenantSupervision = cm.SupervisionSpec{
	Strategy:       cm.RestForOne,
	MaxRestarts:    2,
	RestartWindow:  metav1.Duration{Duration: time.Minute},
	InitialBackoff: metav1.Duration{Duration: 50 * time.Millisecond},
	MaxBackoff:     metav1.Duration{Duration: 200 * time.Millisecond},
	OnExhausted:    cm.ExhaustedStop,
}

// reconcileEvery is how often a tenant's reconciler reconciles.
const reconcileEvery = 10 * time.Millisecond

// observer is told of the run as it happens, for the test: started once
// the manager runs, with the live view's address; told once the story has
// been told. A nil observer is fine, and so are nil fields.
type observer struct {
	started func(m *cm.ControllerManager, viewAddr string)
	told    func()
}

// run serves the live view, runs the manager and tells the story until
// cfg.duration has passed or ctx ends, then shuts down. It returns nil
// after a clean shutdown, also when ctx ended before the story was told.
func run(ctx context.Context, cfg config, out io.Writer, obs *observer) error {
	if obs == nil {
		obs = &observer{}
	}
	var printMu sync.Mutex
	printf := func(format string, args ...any) {
		printMu.Lock()
		defer printMu.Unlock()
		fmt.Fprintf(out, format, args...)
	}
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}

	viewLn, err := net.Listen("tcp", cfg.viewAddr)
	if err != nil {
		return fmt.Errorf("the live view: %w", err)
	}
	defer viewLn.Close()

	if cfg.log == nil {
		cfg.log = io.Discard
	}
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{HealthInterval: metav1.Duration{Duration: 200 * time.Millisecond}},
	}, "tenants", cm.WithLogger(slog.New(slog.NewTextHandler(cfg.log, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}

	// The tenants the manager starts with, and the one onboarded later.
	tenants := map[string]*tenant{}
	for _, name := range []string{"tenant-a", "tenant-b", "tenant-c", "tenant-d"} {
		tenants[name] = newTenant(name)
	}
	m.AddStore(&sharedCache{})
	m.Add(tenants["tenant-a"].group(), tenants["tenant-b"].group(), tenants["tenant-c"].group())

	running := make(chan struct{})
	var runningOnce sync.Once
	seen := newEventLog()
	m.Subscribe(func(e cm.Event) {
		if e.Type == cm.PhaseChanged && e.Phase == cm.PhaseRunning {
			runningOnce.Do(func() { close(running) })
		}
		// The phases, and what happens to the children while the manager
		// runs (not their start and shutdown with the manager's).
		switch {
		case e.Type == cm.PhaseChanged:
			printf("phase: %s\n", e.Phase)
		case e.Phase == cm.PhaseRunning:
			printf("  event: %s\n", describe(e))
		}
		seen.record(e) // once printed: the story prints its tree after
	})

	view := http.NewServeMux()
	view.Handle(liveview.DefaultPrefix+"/", liveview.Handler(m))
	viewSrv := &http.Server{
		Handler:           view,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       webhook.DefaultServerReadTimeout,
		WriteTimeout:      webhook.DefaultServerWriteTimeout,
		IdleTimeout:       webhook.DefaultServerIdleTimeout,
		MaxHeaderBytes:    webhook.DefaultServerMaxHeaderBytes,
	}
	served := make(chan error, 1)
	go func() { served <- viewSrv.Serve(viewLn) }()
	printf("supervision tree, live: http://%s%s/\n", viewLn.Addr(), liveview.DefaultPrefix)

	// The story runs beside Serve, as an operator's requests would: it
	// waits for the manager to run, and a failure of its own stops the
	// manager (runCtx) and is returned.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	storyDone := make(chan error, 1)
	go func() {
		select {
		case <-running:
		case <-runCtx.Done():
			storyDone <- nil
			return
		}
		if obs.started != nil {
			obs.started(m, viewLn.Addr().String())
		}
		s := story{m: m, tenants: tenants, seen: seen, printf: printf}
		err := s.tell(runCtx)
		switch {
		case err == nil:
			printf("the story is told; running until the end of -duration or SIGINT\n")
			if obs.told != nil {
				obs.told()
			}
			s.watch(runCtx)
		case runCtx.Err() != nil:
			printf("the story was cut short: %v\n", err)
			err = nil
		default:
			stopRun(err)
		}
		storyDone <- err
	}()

	// Serve is the host loop: Start, wait for runCtx (the end of the run,
	// SIGINT, SIGTERM, a failed story) or for the manager to stop by
	// itself, then ShutdownAndWait within 10s.
	serveErr := m.Serve(runCtx, 30*time.Second, 10*time.Second)
	// A manager that failed to start, or stopped by itself, ends the story
	// too (it may still wait for the manager to run).
	stopRun(errors.New("the manager stopped"))
	storyErr := <-storyDone

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = viewSrv.Shutdown(shutdownCtx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if serveErr != nil {
		return fmt.Errorf("manager failed: %w", serveErr)
	}
	if storyErr != nil {
		return storyErr
	}
	printf("stopped cleanly\n")
	return nil
}

// story is the run-time part of the program: it onboards tenant-d,
// offboards tenant-b and breaks tenant-c's store, printing the tree after
// each step.
type story struct {
	m       *cm.ControllerManager
	tenants map[string]*tenant
	seen    *eventLog
	printf  func(format string, args ...any)
}

// stepTimeout bounds each request of the story.
const stepTimeout = 10 * time.Second

func (s story) tell(ctx context.Context) error {
	if err := s.printTree(ctx, "1. started: the shared store, then three tenants, each a group"); err != nil {
		return err
	}

	if err := within(ctx, func(ctx context.Context) error { return s.m.AddChild(ctx, s.tenants["tenant-d"].group()) }); err != nil {
		return fmt.Errorf("onboarding tenant-d: %w", err)
	}
	if err := within(ctx, func(ctx context.Context) error { return s.seen.wait(ctx, cm.ChildStarted, "tenant-d/reconciler") }); err != nil {
		return fmt.Errorf("waiting for tenant-d's reconciler to start: %w", err)
	}
	if err := s.printTree(ctx, "2. tenant-d onboarded at run time: its store recovered, then its reconciler started"); err != nil {
		return err
	}

	if err := within(ctx, func(ctx context.Context) error { return s.m.RemoveChild(ctx, "tenant-b") }); err != nil {
		return fmt.Errorf("offboarding tenant-b: %w", err)
	}
	if err := within(ctx, func(ctx context.Context) error { return s.seen.wait(ctx, cm.ChildRemoved, "tenant-b") }); err != nil {
		return fmt.Errorf("waiting for tenant-b's removal: %w", err)
	}
	b := s.tenants["tenant-b"].reconciler
	s.printf("tenant-b's reconciler shut down after %d reconciles (running: %t)\n", b.reconciles.Load(), b.running())
	if err := s.printTree(ctx, "3. tenant-b offboarded: its group stopped and removed"); err != nil {
		return err
	}

	before, err := s.reconciles(ctx)
	if err != nil {
		return err
	}
	s.tenants["tenant-c"].store.breakDown(errors.New("lost its database: connection refused"))
	if err := within(ctx, func(ctx context.Context) error { return s.seen.wait(ctx, cm.ChildStopped, "tenant-c") }); err != nil {
		return fmt.Errorf("waiting for tenant-c to stop: %w", err)
	}
	// The others keep reconciling: wait until each counter has moved on.
	var after map[string]int64
	err = within(ctx, func(ctx context.Context) error {
		for {
			var err error
			if after, err = s.reconciles(ctx); err != nil {
				return err
			}
			if after["tenant-a/reconciler"] > before["tenant-a/reconciler"] && after["tenant-d/reconciler"] > before["tenant-d/reconciler"] {
				return nil
			}
			if err := pause(ctx, reconcileEvery); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return fmt.Errorf("waiting for tenants a and d to reconcile: %w", err)
	}
	if err := s.printTree(ctx, "4. tenant-c's store crash-looped: the group spent its budget and stopped; the others reconcile on"); err != nil {
		return err
	}
	for _, name := range []string{"tenant-a/reconciler", "tenant-d/reconciler"} {
		s.printf("%s: %d reconciles when tenant-c's store broke, %d now\n", name, before[name], after[name])
	}
	return nil
}

// within runs step with ctx bounded by stepTimeout.
func within(ctx context.Context, step func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return step(ctx)
}

// watch prints every second, until ctx ends, what the story left behind:
// tenants a and d reconciling on, tenant-c stopped.
func (s story) watch(ctx context.Context) {
	begin := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		counts, err := s.reconciles(ctx)
		if err != nil {
			return
		}
		st, err := s.m.Status(ctx)
		if err != nil {
			return
		}
		c, _ := st.Child("tenant-c")
		s.printf("+%s: tenant-a/reconciler %d reconciles, tenant-d/reconciler %d; tenant-c %s\n",
			time.Since(begin).Round(time.Second), counts["tenant-a/reconciler"], counts["tenant-d/reconciler"], c.State)
	}
}

// reconciles are the running reconcilers' counters, by path, as their
// health reports them (GetHealth asks each one now).
func (s story) reconciles(ctx context.Context) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	for _, h := range s.m.GetHealth() {
		if n, ok := parseReconciles(h.Message); ok {
			counts[h.Name] = n
		}
	}
	return counts, nil
}

// parseReconciles reads a reconciler's health message, "42 reconciles".
func parseReconciles(message string) (int64, bool) {
	n, ok := strings.CutSuffix(message, " reconciles")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	return v, err == nil
}

// printTree prints the manager's supervision tree under a heading.
func (s story) printTree(ctx context.Context, heading string) error {
	var st cm.Status
	err := within(ctx, func(ctx context.Context) (err error) {
		st, err = s.m.Status(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	messages := map[string]string{}
	for _, h := range s.m.GetHealth() {
		messages[h.Name] = h.Message
	}
	s.printf("\n%s\n%s\n", heading, formatTree(st, messages))
	return nil
}

// formatTree draws st's tree: each child's path, kind and state, a group's
// supervision and budget (ChildStatus.Group), a running child's health
// message from messages (by path) and a stopped child's last error.
func formatTree(st cm.Status, messages map[string]string) string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "manager\t\t%s\n", st.Phase)
	var walk func(children []cm.ChildStatus, indent string)
	walk = func(children []cm.ChildStatus, indent string) {
		for i, c := range children {
			branch, next := "├── ", "│   "
			if i == len(children)-1 {
				branch, next = "└── ", "    "
			}
			fmt.Fprintf(w, "%s%s%s\t%s\t%s\t%s\n", indent, branch, c.Name, c.Kind, c.State, detail(c, messages))
			walk(c.Children, indent+next)
		}
	}
	walk(st.Children, "")
	w.Flush()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// detail is the last column of a child's row.
func detail(c cm.ChildStatus, messages map[string]string) string {
	var parts []string
	if g := c.Group; g != nil {
		on := "Escalate"
		if g.StopOnExhausted {
			on = "Stop"
		}
		parts = append(parts, fmt.Sprintf("%s, restarts %d/%d per %s, OnExhausted %s", g.Strategy, g.Spent, g.MaxRestarts, g.RestartWindow, on))
		if g.Exhausted {
			parts = append(parts, "EXHAUSTED")
		}
	}
	if c.Restarts > 0 {
		parts = append(parts, fmt.Sprintf("restarted %d×", c.Restarts))
	}
	if msg := messages[c.Name]; msg != "" && c.State == cm.StateRunning {
		parts = append(parts, msg)
	}
	if c.LastError != nil && c.State != cm.StateRunning {
		parts = append(parts, "last error: "+c.LastError.Error())
	}
	return strings.Join(parts, "; ")
}

// describe is one line for an event.
func describe(e cm.Event) string {
	s := fmt.Sprintf("%-14s %s", e.Type, e.Child)
	if e.Restarts > 0 {
		s += fmt.Sprintf(" (restarts %d)", e.Restarts)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// eventLog is which events the program has printed, for the story to wait
// on one before it prints the tree that follows.
type eventLog struct {
	mu      sync.Mutex
	seen    map[eventKey]bool
	changed chan struct{} // closed and replaced at each event
}

type eventKey struct {
	typ   cm.EventType
	child string
}

func newEventLog() *eventLog {
	return &eventLog{seen: map[eventKey]bool{}, changed: make(chan struct{})}
}

func (l *eventLog) record(e cm.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[eventKey{e.Type, e.Child}] = true
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns once an event of typ naming child has been recorded, or
// ctx's error.
func (l *eventLog) wait(ctx context.Context, typ cm.EventType, child string) error {
	for {
		l.mu.Lock()
		seen, changed := l.seen[eventKey{typ, child}], l.changed
		l.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tenant is one tenant's children: its store and the reconciler that
// reads it.
type tenant struct {
	name       string
	store      *tenantStore
	reconciler *reconciler
}

func newTenant(name string) *tenant {
	store := &tenantStore{}
	return &tenant{name: name, store: store, reconciler: &reconciler{store: store}}
}

// group is the tenant's supervision group: the store first, so that it
// recovers before the reconciler runs and RestForOne restarts the
// reconciler when the store fails.
func (t *tenant) group() *cm.Group {
	return cm.NewGroup(t.name, tenantSupervision, t.store, t.reconciler)
}

// sharedCache is a store every tenant would read, recovered first, at the
// root.
type sharedCache struct{}

func (*sharedCache) Name() string { return "shared-cache" }

func (*sharedCache) Recover(ctx context.Context) error { return pause(ctx, 50*time.Millisecond) }

// tenantStore is a tenant's store: Recover lists the tenant's objects.
// Once broken (breakDown) it reports the failure from its background work,
// and every Recover after that fails: it crash-loops.
type tenantStore struct {
	mu     sync.Mutex
	broken error
	report func(error)

	objects atomic.Int64
}

func (*tenantStore) Name() string { return "store" }

func (s *tenantStore) Recover(ctx context.Context) error {
	if err := pause(ctx, 20*time.Millisecond); err != nil { // as if listing the tenant's objects
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	s.report, _ = cm.FailureReporter(ctx)
	s.objects.Store(3)
	return nil
}

// Shutdown has nothing to release; a group's children are Runnables.
func (*tenantStore) Shutdown(context.Context) {}

// breakDown makes the store fail now, from its background work, and at
// every Recover from now on.
func (s *tenantStore) breakDown(err error) {
	s.mu.Lock()
	s.broken = err
	report := s.report
	s.mu.Unlock()
	if report != nil {
		report(err)
	}
}

// reconciler is a tenant's controller: Run starts a loop that reconciles
// the store's objects every reconcileEvery and returns; Shutdown stops the
// loop and waits for it. Its health message is its count of reconciles.
type reconciler struct {
	store *tenantStore

	mu         sync.Mutex
	cancel     context.CancelFunc
	done       chan struct{}
	reconciles atomic.Int64
}

func (*reconciler) Name() string { return "reconciler" }

func (r *reconciler) Run(context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		tick := time.NewTicker(reconcileEvery)
		defer tick.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-tick.C:
				if r.store.objects.Load() > 0 {
					r.reconciles.Add(1)
				}
			}
		}
	}()
	return nil
}

func (r *reconciler) Shutdown(ctx context.Context) {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel = nil
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// running reports whether the reconciler's loop is running.
func (r *reconciler) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancel != nil
}

func (r *reconciler) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "reconciler", Healthy: true, Message: fmt.Sprintf("%d reconciles", r.reconciles.Load())}
}

// pause waits d, or less when ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
