package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
)

// background is one start call of a long-running Start(ctx) (a cluster's,
// a controller's) on a goroutine of its own, outliving the call that began
// it, and its stop: the cancel and the goroutine's end, shared by the
// store and the controllers of a member.
type background struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs run on its own goroutine with a context that ctx's end does
// not cancel (only stop does); an error of run before stop is reported to
// the child's supervisor (cm.FailureReporter of ctx) after onErr has
// wrapped it. It returns what stop would do, for a caller that gives up
// before recording it.
func (b *background) start(ctx context.Context, run func(context.Context) error, onErr func(error) error) (abandon func()) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	report, _ := cm.FailureReporter(ctx) // valid after ctx ends, unlike ReportFailure(ctx)
	go func() {
		defer close(done)
		if err := run(runCtx); err != nil && runCtx.Err() == nil && report != nil {
			report(onErr(err))
		}
	}()
	b.mu.Lock()
	b.cancel, b.done = cancel, done
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.cancel, b.done = nil, nil
		b.mu.Unlock()
		cancel()
		<-done
	}
}

// stop cancels what start began, calls then (if any), and waits for its
// end, or for ctx.
func (b *background) stop(ctx context.Context, then func()) {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel, b.done = nil, nil
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	if then != nil {
		then()
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// clusterStore runs a member's cluster.Cluster: Recover builds a fresh one
// from the guarded config, starts it and waits for the informers of every
// watched kind to sync; Shutdown stops it.
//
// Every request of the cluster.Cluster is bound to the store: it ends when
// Recover's context ends before the cache is synced, and when Shutdown is
// called. controller-runtime sends some requests with no context (its
// REST mapper's discovery, in GetInformer and in a client's first call of a
// kind): to an API server that stops answering (a network cut) they would
// hang Recover, and so the stop of the cluster's group and the manager's
// shutdown, until the transport gave up.
type clusterStore struct {
	m  *member
	bg background

	mu   sync.Mutex
	kill context.CancelCauseFunc // ends the requests of the running cluster.Cluster
}

func (s *clusterStore) Name() string { return "cluster" }

func (s *clusterStore) Recover(ctx context.Context) error {
	life, kill := context.WithCancelCause(context.Background())
	fail := func(err error) error {
		kill(err)
		return err
	}
	// Until the cache has synced, the requests end with Recover's context.
	unbind := context.AfterFunc(ctx, func() {
		kill(fmt.Errorf("fleet: cluster %q: its store's start ended: %w", s.m.name, context.Cause(ctx)))
	})
	config := s.m.config()
	config.Wrap(boundTo(life))
	cl, err := cluster.New(config, s.m.opts...)
	if err != nil {
		unbind()
		return fail(fmt.Errorf("fleet: cluster %q: %w", s.m.name, err))
	}
	for _, w := range s.m.warm {
		obj, err := w.object(cl.GetScheme())
		if err == nil {
			_, err = cl.GetCache().GetInformer(ctx, obj)
		}
		if err != nil {
			unbind()
			return fail(fmt.Errorf("fleet: cluster %q: informer for %s: %w", s.m.name, w, err))
		}
	}
	abandon := s.bg.start(ctx, cl.Start, func(err error) error {
		return fmt.Errorf("fleet: cluster %q: %w", s.m.name, err)
	})
	if !cl.GetCache().WaitForCacheSync(ctx) || !unbind() {
		// Stop what this Recover started: a failed Recover leaves
		// nothing running for Shutdown to find.
		err := fail(fmt.Errorf("fleet: cluster %q: caches not synced: %w", s.m.name, context.Cause(ctx)))
		abandon()
		return err
	}
	s.mu.Lock()
	s.kill = kill
	s.mu.Unlock()
	s.m.set(cl)
	return nil
}

func (s *clusterStore) Shutdown(ctx context.Context) {
	s.m.set(nil)
	s.mu.Lock()
	kill := s.kill
	s.kill = nil
	s.mu.Unlock()
	s.bg.stop(ctx, func() {
		if kill != nil {
			kill(fmt.Errorf("fleet: cluster %q: its store was shut down", s.m.name))
		}
	})
}

// boundTo makes a transport whose requests, and the reads of their
// bodies, end when life does.
func boundTo(life context.Context) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if life.Err() != nil {
				return nil, context.Cause(life)
			}
			ctx, cancel := context.WithCancelCause(r.Context())
			stop := context.AfterFunc(life, func() { cancel(context.Cause(life)) })
			release := func() {
				stop()
				cancel(nil)
			}
			resp, err := rt.RoundTrip(r.WithContext(ctx))
			if err != nil {
				release()
				return resp, err
			}
			resp.Body = &boundBody{ReadCloser: resp.Body, release: sync.OnceFunc(release)}
			return resp, nil
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// boundBody releases its request's binding once closed.
type boundBody struct {
	io.ReadCloser
	release func()
}

func (b *boundBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// controller is one reconciler on one member cluster: every Run starts,
// in the background, a fresh controller-runtime controller on each cache
// the member's store runs (follow).
type controller struct {
	spec   *controllerSpec
	m      *member
	bg     background
	failed atomic.Pointer[error]
}

func (c *controller) Name() string { return c.spec.name }

func (c *controller) Run(ctx context.Context) error {
	c.failed.Store(nil)
	c.bg.start(ctx, c.follow, func(err error) error {
		err = fmt.Errorf("fleet: reconciler %q on cluster %q: %w", c.spec.name, c.m.name, err)
		c.failed.Store(&err)
		return err
	})
	return nil
}

// follow runs the reconciler on each cache the member's store runs, one
// after another, until ctx ends. The store may be restarting (a failure,
// RestartChild), or stop the cache a controller was built on (which then
// gets no more events): the reconciler waits for the next cache, and is
// built again on it, rather than fail, which would spend its restart
// budget (and stop the cluster's group) on the store's trouble; and
// rather than wait in Run, which would hold the start of the cluster's
// group, and the fleet's loop for that cluster, while the store restarts.
// A controller-runtime controller returns from Start once its workers
// have: two builds never reconcile at once.
func (c *controller) follow(ctx context.Context) error {
	for {
		cl, gone, err := c.m.wait(ctx)
		if err != nil {
			return nil // stopped
		}
		if err := c.runOn(ctx, cl, gone); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// runOn runs the reconciler on cl until ctx ends or gone is closed (cl
// stopped).
func (c *controller) runOn(ctx context.Context, cl cluster.Cluster, gone <-chan struct{}) error {
	name, spec := c.m.name, c.spec
	wrapped := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		freq := Request{ClusterName: name, Request: req}
		if !spec.enter(freq) {
			// An earlier build's reconcile of the key (a stopped
			// controller's, deaf to its context) has not returned: the
			// key waits for it, as controller-runtime's queue makes one
			// controller's keys wait.
			return reconcile.Result{RequeueAfter: inFlightRetry}, nil
		}
		defer spec.leave(freq)
		return spec.r.Reconcile(ctx, freq)
	})
	opts := c.spec.options
	opts.Reconciler = wrapped
	if c.spec.maxConcurrent > 0 {
		opts.MaxConcurrentReconciles = c.spec.maxConcurrent
	}
	// One controller of this name per cluster, run by the fleet on
	// whichever replica holds the cluster's shard. A panic is always
	// recovered (counted, logged, retried), as ctrlruntime's controllers
	// do: a panic on one member's object would otherwise end the process,
	// every other member with it.
	opts.SkipNameValidation, opts.NeedLeaderElection = ptr.To(true), ptr.To(false)
	opts.RecoverPanic = ptr.To(true)
	ctrl, err := crcontroller.NewUnmanaged(c.spec.name, opts)
	if err != nil {
		return err
	}
	for _, w := range c.spec.watches(cl) {
		obj, err := w.object(cl.GetScheme())
		if err == nil {
			err = ctrl.Watch(source.Kind(cl.GetCache(), obj, w.handler, w.preds...))
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", w, err)
		}
	}
	onCache, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-gone:
			cancel()
		case <-stop:
		}
	}()
	err = ctrl.Start(onCache)
	select {
	case <-gone:
		return nil // its cache stopped: built again on the next
	default:
		return err
	}
}

func (c *controller) GetHealth() cm.HealthStatus {
	h := cm.HealthStatus{Name: c.spec.name, Healthy: true}
	if err := c.failed.Load(); err != nil {
		h.Healthy, h.Message = false, (*err).Error()
	}
	return h
}

func (c *controller) Shutdown(ctx context.Context) { c.bg.stop(ctx, nil) }

// inFlightRetry is how soon a request whose key an earlier build of its
// reconciler still reconciles is tried again.
const inFlightRetry = 250 * time.Millisecond

// enter marks req in flight; false if it is already: a controller of an
// earlier build for the same cluster (its subtree stopped, removed, or
// its config rotated, while a reconcile deaf to its context ran on)
// still reconciles it. controller-runtime's queue keeps one controller
// from reconciling a key twice at once; this keeps two builds from it.
func (s *controllerSpec) enter(req Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.inflight[req]; busy {
		return false
	}
	if s.inflight == nil {
		s.inflight = map[Request]struct{}{}
	}
	s.inflight[req] = struct{}{}
	return true
}

func (s *controllerSpec) leave(req Request) {
	s.mu.Lock()
	delete(s.inflight, req)
	s.mu.Unlock()
}

// controllerSpec is what ControllerManagedBy registered.
type controllerSpec struct {
	mu       sync.Mutex
	inflight map[Request]struct{} // the requests being reconciled, of every cluster and build

	name          string
	forObj        client.Object
	forPreds      []predicate.Predicate
	owns          []watchSpec // handler nil: enqueue the controlling owner of the For kind
	watched       []watchSpec
	filters       []predicate.Predicate // WithEventFilter: on every watch
	r             Reconciler
	maxConcurrent int
	options       crcontroller.Options
}

// watchSpec is one For, Owns, Watches or WatchesMetadata.
type watchSpec struct {
	obj     client.Object
	handler handler.EventHandler
	preds   []predicate.Predicate
	// metadata: WatchesMetadata's, whose informer and events hold the
	// kind's metadata only (object).
	metadata bool
}

// object is what w's informer holds: its object, or, for WatchesMetadata,
// a metav1.PartialObjectMetadata of its kind as scheme names it, as
// controller-runtime's builder projects it.
func (w watchSpec) object(scheme *runtime.Scheme) (client.Object, error) {
	if !w.metadata {
		return w.obj, nil
	}
	gvk, err := apiutil.GVKForObject(w.obj, scheme)
	if err != nil {
		return nil, err
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(gvk)
	return meta, nil
}

// String names w's kind for errors: "*v1.Secret", or "metadata of
// *v1.Secret".
func (w watchSpec) String() string {
	if w.metadata {
		return fmt.Sprintf("metadata of %T", w.obj)
	}
	return fmt.Sprintf("%T", w.obj)
}

// watches are the spec's watches on cluster cl: For, then each Owns and
// Watches in the order given, every one filtered by WithEventFilter's
// predicates and its own.
func (s *controllerSpec) watches(cl cluster.Cluster) []watchSpec {
	preds := func(own []predicate.Predicate) []predicate.Predicate {
		return append(append([]predicate.Predicate(nil), s.filters...), own...)
	}
	out := []watchSpec{{obj: s.forObj, handler: &handler.EnqueueRequestForObject{}, preds: preds(s.forPreds)}}
	for _, o := range s.owns {
		h := handler.EnqueueRequestForOwner(cl.GetScheme(), cl.GetRESTMapper(), s.forObj, handler.OnlyControllerOwner())
		out = append(out, watchSpec{obj: o.obj, handler: h, preds: preds(o.preds)})
	}
	for _, w := range s.watched {
		out = append(out, watchSpec{obj: w.obj, handler: w.handler, preds: preds(w.preds), metadata: w.metadata})
	}
	return out
}

// kinds are the kinds the spec watches (metadata only for
// WatchesMetadata), whose informers a member's cache starts and syncs
// before its reconcilers run.
func (s *controllerSpec) kinds() []watchSpec {
	out := []watchSpec{{obj: s.forObj}}
	for _, w := range append(append([]watchSpec(nil), s.owns...), s.watched...) {
		out = append(out, watchSpec{obj: w.obj, metadata: w.metadata})
	}
	return out
}

// Option configures one For, Owns or Watches: multicluster-runtime's
// mcbuilder.WithPredicates and its kind.
type Option interface{ apply(*watchSpec) }

type predicatesOption []predicate.Predicate

func (p predicatesOption) apply(w *watchSpec) { w.preds = append(w.preds, p...) }

// WithPredicates filters the events of one For, Owns or Watches, as
// controller-runtime's builder.WithPredicates does: an event enqueues a
// request only if every predicate passes.
func WithPredicates(preds ...predicate.Predicate) Option { return predicatesOption(preds) }

// Builder registers a reconciler run on every member cluster: the shape of
// multicluster-runtime's mcbuilder.
type Builder struct {
	m             *Manager
	name          string
	forObj        client.Object
	forPreds      []predicate.Predicate
	owns          []watchSpec
	watched       []watchSpec
	filters       []predicate.Predicate
	maxConcurrent int
	options       crcontroller.Options
	errs          []error
}

// ControllerManagedBy starts a reconciler's registration with m.
func ControllerManagedBy(m *Manager) *Builder { return &Builder{m: m} }

// Named sets the reconciler's name: its child's name in each cluster's
// group (default: the For kind's Go type name, lower case).
func (b *Builder) Named(name string) *Builder { b.name = name; return b }

// For sets the kind reconciled: its objects' requests are enqueued, in
// each member cluster, with the cluster's name. Called twice, Complete
// fails, as controller-runtime's builder does.
func (b *Builder) For(obj client.Object, opts ...Option) *Builder {
	if b.forObj != nil {
		b.errs = append(b.errs, errors.New("For called more than once"))
	}
	var w watchSpec
	for _, o := range opts {
		o.apply(&w)
	}
	b.forObj, b.forPreds = obj, w.preds
	return b
}

// Owns watches obj's kind too, in each member cluster: a change enqueues
// the For object that controls it (its controller owner reference), as
// controller-runtime's builder's Owns does.
func (b *Builder) Owns(obj client.Object, opts ...Option) *Builder {
	w := watchSpec{obj: obj}
	for _, o := range opts {
		o.apply(&w)
	}
	if obj == nil {
		b.errs = append(b.errs, errors.New("Owns: object is nil"))
	}
	b.owns = append(b.owns, w)
	return b
}

// Watches watches obj's kind in each member cluster, h mapping its events
// to requests (handler.EnqueueRequestsFromMapFunc, say); the reconciler
// gets them with the cluster's name.
func (b *Builder) Watches(obj client.Object, h handler.EventHandler, opts ...Option) *Builder {
	return b.watch("Watches", watchSpec{obj: obj, handler: h}, opts)
}

// WatchesMetadata is Watches of obj's metadata only, as
// controller-runtime's builder's WatchesMetadata: each member's cache
// holds a metav1.PartialObjectMetadata informer of obj's kind (named by
// the cluster's scheme), and h and the predicates get
// *metav1.PartialObjectMetadata objects. A kind the cluster's scheme does
// not know fails the start of that cluster's cache (its store "cluster"),
// the error naming the kind, and the cluster with it.
func (b *Builder) WatchesMetadata(obj client.Object, h handler.EventHandler, opts ...Option) *Builder {
	return b.watch("WatchesMetadata", watchSpec{obj: obj, handler: h, metadata: true}, opts)
}

// watch records w, a Watches or WatchesMetadata (call, for its error),
// with its options.
func (b *Builder) watch(call string, w watchSpec, opts []Option) *Builder {
	for _, o := range opts {
		o.apply(&w)
	}
	if w.obj == nil || w.handler == nil {
		b.errs = append(b.errs, fmt.Errorf("%s %T: object and handler must not be nil", call, w.obj))
	}
	b.watched = append(b.watched, w)
	return b
}

// WithEventFilter filters the events of every watch (For, Owns, Watches,
// WatchesMetadata), as controller-runtime's builder's does.
func (b *Builder) WithEventFilter(p predicate.Predicate) *Builder {
	b.filters = append(b.filters, p)
	return b
}

// WithOptions sets the controller's options (MaxConcurrentReconciles,
// RateLimiter, ...) for every cluster's controller; its Reconciler,
// SkipNameValidation, NeedLeaderElection and RecoverPanic are the fleet's
// (a panic is always recovered: on one member's object it would otherwise
// end the process, and every member's reconcilers with it).
func (b *Builder) WithOptions(o crcontroller.Options) *Builder { b.options = o; return b }

// WithMaxConcurrentReconciles sets each cluster's worker count (default 1).
func (b *Builder) WithMaxConcurrentReconciles(n int) *Builder { b.maxConcurrent = n; return b }

// Complete registers r.
func (b *Builder) Complete(r Reconciler) error {
	errs := append([]error(nil), b.errs...)
	if b.m == nil {
		errs = append(errs, errors.New("manager is nil"))
	}
	if b.forObj == nil {
		errs = append(errs, errors.New("For was not called"))
	}
	if r == nil {
		errs = append(errs, errors.New("reconciler is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	name := b.name
	if name == "" {
		name = strings.ToLower(reflect.TypeOf(b.forObj).Elem().Name())
	}
	return b.m.add(&controllerSpec{name: name, forObj: b.forObj, forPreds: b.forPreds, owns: b.owns, watched: b.watched,
		filters: b.filters, r: r, maxConcurrent: b.maxConcurrent, options: b.options})
}
