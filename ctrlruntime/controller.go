package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
)

// Controller is a reconcile.Reconciler hosted as a supervised
// controllermanager.Controller; build it with NewControllerManagedBy.
type Controller = TypedController[reconcile.Request]

// TypedSource builds one source of a typed reconciler from the cache it is
// given: the shared cache, as the incarnation being started sees it. It is
// called once per incarnation, because a controller-runtime source cannot
// be started twice; a source that watches the cache must use the cache
// passed here (source.TypedKind(c, ...)), so that its handlers are removed
// when the incarnation stops. HasSynced of a handler registered through
// that cache waits until the handler has received the informer's initial
// objects (or the incarnation has stopped) rather than answering false at
// once: client-go's WaitForCacheSync then returns at its first call instead
// of after a 100 ms poll period. Do not call it where blocking matters.
type TypedSource[request comparable] func(c cache.Cache) source.TypedSource[request]

// TypedController hosts a reconcile.TypedReconciler as a
// controllermanager.Controller. Every Run builds a fresh controller-runtime
// controller, with a fresh queue and fresh sources on the shared cache, so
// the supervisor can restart it as often as its budget allows (a
// controller-runtime controller refuses a second Start).
//
// Run starts the sources, waits until they have synced (bounded by Run's
// context and CacheSyncTimeout), starts the workers and returns. Shutdown
// stops the sources and the queue, and waits for the reconciles in flight
// to return, or for its context to end. GetHealth is unhealthy while the
// watched caches have not synced, while a reconcile has run past
// StuckAfter, and while the error rate is past ErrorRateThreshold, each
// reason in the message. A reconcile that panics is recovered, counted,
// logged with its stack and retried with backoff, as controller-runtime
// does; with a positive PanicThreshold (or RecoverPanic false), the
// PanicThreshold-th panic of one incarnation makes the reconciler report a
// failure (a *ReconcilePanicError) through the
// controllermanager.FailureReporter of its Run, and the supervisor
// restarts it alone.
type TypedController[request comparable] struct {
	name       string
	ctx        *Context
	reconciler reconcile.TypedReconciler[request]
	sources    []TypedSource[request]
	opts       TypedOptions[request]
	// newController builds an incarnation's controller on its cache (the
	// builder's replay); nil: New's, from opts and sources.
	newController      func(c cache.Cache, r reconcile.TypedReconciler[request]) (controller.TypedController[request], error)
	needLeaderElection bool
	// upstream is the controller built by controller-runtime's builder on
	// another manager, which runs it: every method goes to it.
	upstream controller.TypedController[request]

	mu   sync.Mutex
	cur  *incarnation[request]
	runs int
	// busy are the keys a reconcile of any incarnation runs: a reconcile
	// deaf to its context outlives its incarnation's Shutdown, and the
	// next incarnation must not reconcile its key at once with it.
	busy busyKeys[request]
	// ending, set by a Manager, reports whether the manager is shutting
	// down (see Shutdown); nil: never known.
	ending atomic.Pointer[func() bool]
}

type busyKeys[request comparable] struct {
	mu   sync.Mutex
	keys map[request]struct{}
}

func (b *busyKeys[request]) enter(req request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.keys[req]; ok {
		return false
	}
	if b.keys == nil {
		b.keys = map[request]struct{}{}
	}
	b.keys[req] = struct{}{}
	return true
}

func (b *busyKeys[request]) leave(req request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.keys, req)
}

var (
	_ cm.Controller              = (*Controller)(nil)
	_ interface{ Name() string } = (*Controller)(nil)
)

type incarnation[request comparable] struct {
	cancel     context.CancelFunc
	done       chan struct{} // closed when the controller's Start has returned
	cache      *incarnationCache
	supervised *supervised[request]
	// guard is the lease guard of Run's context (nil without one): its
	// error wraps ErrLeaseLost once the lease this incarnation runs under
	// is lost.
	guard   func() error
	synced  bool // Run's wait for the sources is over
	stopped bool // Shutdown has been called
}

// New hosts a typed reconciler named name (unique in its manager; the name
// of its controller-runtime metrics) fed by sources. The kinds the sources
// watch are not known to the Context: give them to ctx.Warm to have their
// informers synced before the election. On a Manager's Context, the zero
// fields of opts take the manager's controller defaults
// (manager.Options.Controller: MaxConcurrentReconciles, CacheSyncTimeout,
// UsePriorityQueue, RecoverPanic, ReconciliationTimeout, Logger), and its
// NeedLeaderElection is the controller's, as controller.NewTyped does with
// a manager.
func New[request comparable](ctx *Context, name string, r reconcile.TypedReconciler[request], opts TypedOptions[request], sources ...TypedSource[request]) (*TypedController[request], error) {
	var errs []error
	if len(sources) == 0 {
		errs = append(errs, errors.New("no source: nothing would be reconciled"))
	}
	for i, s := range sources {
		if s == nil {
			errs = append(errs, fmt.Errorf("source #%d is nil", i))
		}
	}
	var defaults *managerDefaults
	if ctx != nil {
		defaults = ctx.defaults
	}
	c, err := newTypedController(ctx, name, r, withControllerDefaults(defaults, opts), errs)
	if err != nil {
		return nil, err
	}
	c.sources = sources
	c.needLeaderElection = defaults.needLeaderElection()
	return c, nil
}

// newTypedController checks what New and Build have in common, and joins
// errs with what it finds.
func newTypedController[request comparable](ctx *Context, name string, r reconcile.TypedReconciler[request], opts TypedOptions[request], errs []error) (*TypedController[request], error) {
	if ctx == nil {
		errs = append(errs, errors.New("context is nil"))
	}
	if name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if r == nil {
		errs = append(errs, errors.New("reconciler is nil"))
	}
	if opts.ErrorRateThreshold > 1 {
		errs = append(errs, fmt.Errorf("ErrorRateThreshold %v is past 1", opts.ErrorRateThreshold))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: reconciler %q: %w", name, err)
	}
	return &TypedController[request]{name: name, ctx: ctx, reconciler: r, opts: opts.withDefaults(), needLeaderElection: true}, nil
}

// Name is the reconciler's name: its child's name in the manager, and the
// "controller" label of its controller-runtime metrics.
func (c *TypedController[request]) Name() string { return c.name }

// Run builds a fresh controller-runtime controller, starts its sources on the
// shared cache, waits until they have synced, starts the workers and
// returns. The workers run on a context of their own, ended by Shutdown (a
// manager cancels Run's context once Run has returned).
func (c *TypedController[request]) Run(ctx context.Context) error {
	if c.upstream != nil {
		return fmt.Errorf("ctrlruntime: reconciler %q was built on %s and runs there: its Start is that manager's", c.name, "another manager")
	}
	report, _ := cm.FailureReporter(ctx)
	icache := newIncarnationCache(c.ctx.cache, c.ctx.kindOf)
	sup := newSupervised(c.name, c.reconciler, c.opts, report)
	// The controller-runtime controller recovers the panic sup passes on:
	// it counts and logs it as it does for any controller.
	sup.repanic = true
	sup.busy = &c.busy
	ctrl, err := c.buildController(icache, sup)
	if err != nil {
		return fmt.Errorf("ctrlruntime: reconciler %q: %w", c.name, err)
	}
	if err := c.watchSources(ctrl, icache); err != nil {
		return err
	}
	warm, ok := ctrl.(interface{ Warmup(context.Context) error })
	if !ok { // controller-runtime's controllers have had Warmup since v0.21
		return fmt.Errorf("ctrlruntime: reconciler %q: %T has no Warmup", c.name, ctrl)
	}

	workCtx, cancel := context.WithCancel(context.Background())
	inc := &incarnation[request]{cancel: cancel, done: make(chan struct{}), cache: icache, supervised: sup}
	if guard, ok := cm.LeaseGuard(ctx); ok {
		inc.guard = guard
	}
	c.mu.Lock()
	c.cur = inc
	c.runs++
	c.mu.Unlock()

	warmed := make(chan error, 1)
	go func() { warmed <- warm.Warmup(workCtx) }()
	select {
	case err = <-warmed:
		warmed = nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err == nil && workCtx.Err() != nil { // Shutdown came first
		err = errors.New("shut down while starting")
	}
	if err != nil {
		cancel()
		if warmed != nil {
			<-warmed // returns once workCtx has ended
		}
		close(inc.done)
		icache.removeHandlers()
		return fmt.Errorf("ctrlruntime: reconciler %q: sources did not sync: %w", c.name, err)
	}
	c.mu.Lock()
	inc.synced = true
	c.mu.Unlock()
	go func() {
		defer close(inc.done)
		if err := ctrl.Start(workCtx); err != nil && workCtx.Err() == nil {
			report(fmt.Errorf("ctrlruntime: reconciler %q stopped: %w", c.name, err))
		}
	}()
	return nil
}

// buildController builds one incarnation's controller-runtime controller.
func (c *TypedController[request]) buildController(icache cache.Cache, sup *supervised[request]) (controller.TypedController[request], error) {
	if c.newController != nil {
		return c.newController(icache, sup)
	}
	return controller.NewTypedUnmanaged(c.name, controller.TypedOptions[request]{
		// Every incarnation is a new controller of the same name; the
		// manager keeps names unique.
		SkipNameValidation:      ptr.To(true),
		MaxConcurrentReconciles: c.opts.MaxConcurrentReconciles,
		CacheSyncTimeout:        c.opts.CacheSyncTimeout,
		Reconciler:              sup,
		RateLimiter:             c.opts.RateLimiter,
		Logger:                  c.opts.Logger,
		LogConstructor:          c.opts.LogConstructor,
		UsePriorityQueue:        c.opts.UsePriorityQueue,
		ReconciliationTimeout:   c.opts.ReconciliationTimeout,
		// Warmup starts the sources and waits for them without starting
		// the workers: what Run must do before it returns.
		EnableWarmup: ptr.To(true),
		// Never a crash of the process: with Options.RecoverPanic false,
		// the supervised reconciler reports the first panic as a failure.
		RecoverPanic: ptr.To(true),
	})
}

// watchSources adds the sources of New (and of Watch) to ctrl, built on
// icache.
func (c *TypedController[request]) watchSources(ctrl controller.TypedController[request], icache cache.Cache) error {
	c.mu.Lock()
	sources := append([]TypedSource[request](nil), c.sources...)
	c.mu.Unlock()
	for i, build := range sources {
		src := build(icache)
		if src == nil {
			return fmt.Errorf("ctrlruntime: reconciler %q: source #%d built nil", c.name, i)
		}
		if err := ctrl.Watch(src); err != nil {
			return fmt.Errorf("ctrlruntime: reconciler %q: source #%d: %w", c.name, i, err)
		}
	}
	return nil
}

// Shutdown stops the sources and the queue and waits until every reconcile
// in flight has returned, or ctx ends. The handlers the incarnation added to
// the shared informers are removed either way.
//
// A reconcile that ignores its context and is still running when ctx ends
// decides what Shutdown does then:
//   - for a restart (a failure, RestartChild), under the lease, Shutdown
//     returns: the reconcile goes on in the background, the next
//     incarnation starts, and it does not reconcile that key until the old
//     reconcile has returned (no key is ever reconciled twice at once);
//   - when the lease this incarnation ran under is lost (its lease guard
//     fails), or the Manager it was added to is shutting down, Shutdown
//     does not return until the reconcile has: a Shutdown that has
//     returned tells the manager this controller's code has stopped, and
//     the manager then gives the Lease up to another replica. The manager
//     reports the controller as unstopped instead (Start's error, an
//     *UnstoppedError naming it; a lost lease fails the manager at the
//     fence timeout), and keeps the Lease, which expires once the process
//     has exited, rather than hand it over while this replica still
//     reconciles.
func (c *TypedController[request]) Shutdown(ctx context.Context) {
	c.mu.Lock()
	inc := c.cur
	if inc != nil {
		inc.stopped = true
	}
	c.mu.Unlock()
	if inc == nil {
		return
	}
	inc.cancel()
	select {
	case <-inc.done:
	case <-ctx.Done():
		if c.final(inc) {
			running := inc.supervised.running()
			c.GetLogger().Error(context.Cause(ctx), "reconciles ignore their context: Shutdown waits for them, so that the Lease is not given up while they run",
				"reconciles", running)
			<-inc.done
		}
	}
	inc.cache.removeHandlers()
}

// final reports whether inc's Shutdown is its last under this lease: the
// lease it ran under is lost, or the Manager it was added to is shutting
// down.
func (c *TypedController[request]) final(inc *incarnation[request]) bool {
	if inc.guard != nil && errors.Is(inc.guard(), cm.ErrLeaseLost) {
		// Lost, not merely unproven for a moment (a late renewal): a
		// restart then still goes ahead.
		return true
	}
	ending := c.ending.Load()
	return ending != nil && (*ending)()
}

// setEnding has Shutdown ask ending whether the manager is shutting down.
func (c *TypedController[request]) setEnding(ending func() bool) { c.ending.Store(&ending) }

// GetHealth says whether the current incarnation is healthy; the message
// gives every reason it is not, and its reconcile counts.
func (c *TypedController[request]) GetHealth() cm.HealthStatus {
	c.mu.Lock()
	inc := c.cur
	var synced, stopped bool
	if inc != nil {
		synced, stopped = inc.synced, inc.stopped
	}
	c.mu.Unlock()
	switch {
	case inc == nil:
		return cm.HealthStatus{Name: c.name, Message: "not started"}
	case stopped:
		return cm.HealthStatus{Name: c.name, Message: "shut down"}
	case !synced:
		return cm.HealthStatus{Name: c.name, Message: "caches not synced: waiting for the sources to sync"}
	}
	var problems []string
	if kinds := inc.cache.unsynced(); len(kinds) > 0 {
		problems = append(problems, fmt.Sprintf("caches not synced: %v", kinds))
	}
	more, summary := inc.supervised.problems()
	problems = append(problems, more...)
	if len(problems) > 0 {
		return cm.HealthStatus{Name: c.name, Message: joinProblems(problems) + " (" + summary + ")"}
	}
	return cm.HealthStatus{Name: c.name, Healthy: true, Message: summary}
}

// unsyncedCaches names what keeps the running incarnation from being
// synced: nothing when none runs.
func (c *TypedController[request]) unsyncedCaches() []string {
	c.mu.Lock()
	inc := c.cur
	var synced, stopped bool
	if inc != nil {
		synced, stopped = inc.synced, inc.stopped
	}
	c.mu.Unlock()
	switch {
	case inc == nil || stopped:
		return nil
	case !synced:
		return []string{"waiting for the sources to sync"}
	}
	return inc.cache.unsynced()
}

// Stats are the counts of a reconciler's current incarnation.
type Stats struct {
	Incarnations int // times Run has been called
	Reconciles   int // reconciles ended in the current incarnation
	Failed       int // of which returned an error or panicked
	Panics       int // of which panicked
	Handlers     int // event handlers the incarnation has on shared informers
}

// Stats returns the counts of the current incarnation.
func (c *TypedController[request]) Stats() Stats {
	c.mu.Lock()
	inc, runs := c.cur, c.runs
	c.mu.Unlock()
	s := Stats{Incarnations: runs}
	if inc != nil {
		s.Reconciles, s.Failed, s.Panics = inc.supervised.counts()
		s.Handlers = inc.cache.handlerCount()
	}
	return s
}

// The methods below make a *TypedController the controller.TypedController
// that controller-runtime's Build returns, so that code written against
// that (c, err := ...Build(r); c.Watch(src)) compiles and runs unchanged.
var (
	_ controller.Controller          = (*Controller)(nil)
	_ manager.LeaderElectionRunnable = (*Controller)(nil)
)

// Watch adds a source to every incarnation from the next Run on, and to the
// running one: the same src is started by each (see
// Builder.WatchesRawSource). Built on another manager, it is that
// controller's Watch.
func (c *TypedController[request]) Watch(src source.TypedSource[request]) error {
	if c.upstream != nil {
		return c.upstream.Watch(src)
	}
	if src == nil {
		return fmt.Errorf("ctrlruntime: reconciler %q: Watch: source is nil", c.name)
	}
	c.mu.Lock()
	c.sources = append(c.sources, func(cache.Cache) source.TypedSource[request] { return src })
	c.mu.Unlock()
	return nil
}

// Start runs the controller as a manager.Runnable does, until ctx ends:
// Run, then Shutdown once ctx has ended. Built on another manager, it is
// that controller's Start.
func (c *TypedController[request]) Start(ctx context.Context) error {
	if c.upstream != nil {
		return c.upstream.Start(ctx)
	}
	if err := c.Run(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), DefaultCacheSyncTimeout)
	defer cancel()
	c.Shutdown(sctx)
	return nil
}

// Reconcile calls the reconciler, as controller-runtime's controller does.
func (c *TypedController[request]) Reconcile(ctx context.Context, req request) (reconcile.Result, error) {
	if c.upstream != nil {
		return c.upstream.Reconcile(ctx, req)
	}
	return c.reconciler.Reconcile(ctx, req)
}

// GetLogger is the controller's logger.
func (c *TypedController[request]) GetLogger() logr.Logger {
	if c.upstream != nil {
		return c.upstream.GetLogger()
	}
	if c.opts.Logger.GetSink() == nil {
		return logr.Discard()
	}
	return c.opts.Logger.WithValues("controller", c.name)
}

// NeedLeaderElection is false for a controller built with
// controller.Options.NeedLeaderElection false: a Manager runs it on every
// replica.
func (c *TypedController[request]) NeedLeaderElection() bool {
	if le, ok := c.upstream.(manager.LeaderElectionRunnable); ok {
		return le.NeedLeaderElection()
	}
	return c.needLeaderElection
}
