package ctrlruntime

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
)

// Builder is controller-runtime's builder.Builder, whose controller is a
// supervised child: every method and option of controller-runtime's
// builder (For, Owns, Watches, WatchesMetadata, WatchesRawSource,
// WithEventFilter, WithOptions, WithLogConstructor, Named, Complete, Build;
// builder.WithPredicates, builder.OnlyMetadata, builder.MatchEveryOwner)
// is taken as it is and means what it means there.
//
// It records the calls and replays them on controller-runtime's own
// builder, once when Build or Complete is called (so that a declaration
// fails with controller-runtime's error) and again for every incarnation
// of the controller, on a fresh controller with a fresh queue, whose
// sources watch the shared cache through handlers removed when the
// incarnation stops. On a manager that is not a *Manager (ctrl.NewManager's),
// every call goes straight to controller-runtime's builder: the result is
// exactly ctrl.NewControllerManagedBy(mgr)'s.
type Builder struct {
	mgr   *Manager // nil: built on a Context or another manager
	ctx   *Context
	up    *builder.Builder // on another manager.Manager: the builder every call goes to
	upMgr manager.Manager  // that manager
	steps []step
	warm  []client.Object // the kinds watched, as the informers will hold them
	sup   Options
	opts  controller.Options // the last WithOptions
	shard cm.Shard           // ForShard's; Count < 2: every key
	errs  []error
}

// step replays one call on controller-runtime's builder; c is the cache an
// incarnation's per-incarnation sources watch.
type step func(b *builder.Builder, c cache.Cache) *builder.Builder

// WatchOption configures one For, Owns or Watches: controller-runtime's
// builder.WithPredicates is one, and so are builder.OnlyMetadata and
// builder.MatchEveryOwner where controller-runtime takes them.
//
// Deprecated: pass controller-runtime's builder options.
type WatchOption = builder.Predicates

// WithPredicates is builder.WithPredicates.
//
// Deprecated: use builder.WithPredicates.
func WithPredicates(preds ...predicate.Predicate) builder.Predicates {
	return builder.WithPredicates(preds...)
}

// MatchEveryOwner is builder.MatchEveryOwner.
//
// Deprecated: use builder.MatchEveryOwner.
func MatchEveryOwner() builder.OwnsOption { return builder.MatchEveryOwner }

// Host is what NewControllerManagedBy builds on: any manager.Manager, or a
// *Context. Both have the shared cache and scheme.
type Host interface {
	GetCache() cache.Cache
	GetScheme() *runtime.Scheme
}

// NewControllerManagedBy starts declaring a reconciler on host: the
// counterpart of ctrl.NewControllerManagedBy(mgr), and the only line of a
// kubebuilder SetupWithManager(mgr ctrl.Manager) that changes.
//   - On a *Manager, Complete (and Build) add the reconciler to it, as a
//     supervised child restarted alone.
//   - On a *Context, Build returns it, to Add to a ControllerManager.
//   - On any other manager.Manager (controller-runtime's own, from
//     ctrl.NewManager), it is controller-runtime's builder: the same
//     SetupWithManager runs on either manager.
func NewControllerManagedBy(host Host) *Builder {
	b := &Builder{}
	switch h := host.(type) {
	case *Manager:
		if h == nil {
			b.errs = append(b.errs, errors.New("manager is nil"))
			break
		}
		b.mgr, b.ctx = h, h.cctx
	case *Context:
		b.ctx = h
		if h == nil {
			b.errs = append(b.errs, errors.New("context is nil"))
		}
	case nil:
		b.errs = append(b.errs, errors.New("host is nil: give a manager.Manager or a *ctrlruntime.Context"))
	case manager.Manager:
		b.up, b.upMgr = builder.ControllerManagedBy(h), h
	default:
		b.errs = append(b.errs, fmt.Errorf("%T is neither a manager.Manager nor a *ctrlruntime.Context", host))
	}
	return b
}

// record replays s on controller-runtime's builder: at once on another
// manager, per build here.
func (b *Builder) record(s step) *Builder {
	if b.up != nil {
		b.up = s(b.up, nil)
		return b
	}
	b.steps = append(b.steps, s)
	return b
}

// Named is builder.Builder.Named: the controller's name, its child name
// and its metrics' "controller" label. Default: the For kind, lower-cased.
func (b *Builder) Named(name string) *Builder {
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.Named(name) })
}

// For is builder.Builder.For: the kind reconciled, given once.
func (b *Builder) For(obj client.Object, opts ...builder.ForOption) *Builder {
	b.warmKind(obj, metadataOnly(opts))
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.For(obj, opts...) })
}

// Owns is builder.Builder.Owns: a kind the reconciler creates, whose events
// enqueue its controller owner of the For kind (every owner with
// builder.MatchEveryOwner).
func (b *Builder) Owns(obj client.Object, opts ...builder.OwnsOption) *Builder {
	b.warmKind(obj, metadataOnly(opts))
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.Owns(obj, opts...) })
}

// Watches is builder.Builder.Watches: a kind whose events h maps to
// requests.
func (b *Builder) Watches(obj client.Object, h handler.EventHandler, opts ...builder.WatchesOption) *Builder {
	b.warmKind(obj, metadataOnly(opts))
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.Watches(obj, h, opts...) })
}

// WatchesMetadata is builder.Builder.WatchesMetadata: Watches with
// builder.OnlyMetadata.
func (b *Builder) WatchesMetadata(obj client.Object, h handler.EventHandler, opts ...builder.WatchesOption) *Builder {
	b.warmKind(obj, true)
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.WatchesMetadata(obj, h, opts...) })
}

// WatchesRawSource is builder.Builder.WatchesRawSource. The one src is
// started again by every incarnation of the controller: a source.Kind on
// the manager's GetCache adds a handler to the shared informer at each
// restart that is not removed. For a source that is built afresh per
// incarnation, on a cache whose handlers are removed, use WatchesSource.
func (b *Builder) WatchesRawSource(src source.Source) *Builder {
	if src == nil && b.up == nil {
		b.errs = append(b.errs, errors.New("WatchesRawSource: source is nil"))
		return b
	}
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.WatchesRawSource(src) })
}

// WatchesSource adds a source built for each incarnation on the cache it
// is given (a channel, a timer, a kind with a typed handler): see
// TypedSource. On another manager it is built once, on that manager's
// cache.
func (b *Builder) WatchesSource(src TypedSource[reconcile.Request]) *Builder {
	if src == nil {
		b.errs = append(b.errs, errors.New("WatchesSource: source is nil"))
		return b
	}
	if b.up != nil {
		b.up = b.up.WatchesRawSource(src(b.upCache()))
		return b
	}
	b.steps = append(b.steps, func(u *builder.Builder, c cache.Cache) *builder.Builder { return u.WatchesRawSource(src(c)) })
	return b
}

// WithEventFilter is builder.Builder.WithEventFilter: p filters the events
// of every watch.
func (b *Builder) WithEventFilter(p predicate.Predicate) *Builder {
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.WithEventFilter(p) })
}

// WithOptions is builder.Builder.WithOptions; each call replaces the
// options of the one before, LogConstructor included, as there. Under a
// Manager or a Context, RecoverPanic nil or true is controller-runtime's
// (a panic is recovered, counted, logged with its stack, and the request
// retried with backoff; the reconciler runs on), and RecoverPanic false,
// which would end the process under controller-runtime, fails the
// reconciler at its first panic: the supervisor restarts it (see
// Options.RecoverPanic). EnableWarmup is always true (Run returns once the sources have synced)
// and SkipNameValidation is always true (every incarnation is a new
// controller of the same name; the manager keeps child names unique).
// NeedLeaderElection false makes a Manager run the controller on every
// replica (Complete, or Add of what Build returns); a ControllerManager
// built by hand runs every controller only while elected.
func (b *Builder) WithOptions(opts controller.Options) *Builder {
	if b.up != nil {
		b.up = b.up.WithOptions(opts)
		return b
	}
	b.opts = opts
	forced := opts
	forced.RecoverPanic, forced.EnableWarmup, forced.SkipNameValidation = ptr.To(true), ptr.To(true), ptr.To(true)
	b.steps = append(b.steps, func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.WithOptions(forced) })
	return b
}

// WithLogConstructor is builder.Builder.WithLogConstructor.
func (b *Builder) WithLogConstructor(f func(*reconcile.Request) logr.Logger) *Builder {
	return b.record(func(u *builder.Builder, _ cache.Cache) *builder.Builder { return u.WithLogConstructor(f) })
}

// WithSupervision sets how the supervisor judges the reconciler: its
// PanicThreshold, StuckAfter, ErrorRate* and Clock fields (the others are
// controller-runtime's, given with WithOptions, RecoverPanic included). On
// another manager it has no effect.
func (b *Builder) WithSupervision(opts Options) *Builder {
	b.sup = Options{
		PanicThreshold: opts.PanicThreshold, StuckAfter: opts.StuckAfter,
		ErrorRateThreshold: opts.ErrorRateThreshold, ErrorRateWindow: opts.ErrorRateWindow,
		ErrorRateMinReconciles: opts.ErrorRateMinReconciles, Clock: opts.Clock,
	}
	return b
}

// Complete is builder.Builder.Complete: it builds the reconciler and adds
// it to the manager given to NewControllerManagedBy. On a Context, use
// Build.
func (b *Builder) Complete(r reconcile.Reconciler) error {
	if b.up != nil && len(b.errs) == 0 {
		return b.up.Complete(r)
	}
	if b.mgr == nil && len(b.errs) == 0 {
		return errors.New("ctrlruntime: Complete adds the reconciler to a Manager, and this builder is on a Context: use Build, then the ControllerManager's Add")
	}
	_, err := b.Build(r)
	return err
}

// Build is builder.Builder.Build: it builds the reconciler, failing with
// controller-runtime's errors, and on a manager adds it to the manager, as
// controller-runtime's Build does. The controller it returns is a
// controller.Controller; on a Manager or a Context it is also a
// controllermanager.Controller: built on a Context, it is to Add to a
// ControllerManager (or to return from AddSharded's build). The kinds
// watched are given to the Context's Warm, so that their informers sync in
// the pre-flight.
func (b *Builder) Build(r reconcile.Reconciler) (*Controller, error) {
	if err := errors.Join(b.errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: %w", err)
	}
	if b.up != nil {
		c, err := b.up.Build(r)
		if err != nil {
			return nil, err
		}
		return &Controller{name: controllerName(c), upstream: c}, nil
	}
	// A first build, never started, checks the declaration as
	// controller-runtime does and names the controller.
	dry, err := b.replay(b.ctx.GetCache(), r)
	if err != nil {
		return nil, err
	}
	name := controllerName(dry)
	if r != nil {
		r = ShardReconciler(b.shard, r)
	}
	sup := b.sup
	sup.RecoverPanic = b.recoverPanic()
	if d := b.ctx.defaults; d != nil {
		// For GetLogger, and what Shutdown logs.
		sup.Logger = withControllerDefaults(d, Options{Logger: b.opts.Logger}).Logger
	}
	c, err := newTypedController(b.ctx, name, r, sup, nil)
	if err != nil {
		return nil, err
	}
	c.newController = b.replay
	c.needLeaderElection = b.needLeaderElection()
	b.ctx.Warm(b.warm...)
	if b.mgr != nil {
		if err := b.mgr.Add(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// replay builds one controller-runtime controller from the recorded calls,
// its sources on c, reconciling with r.
func (b *Builder) replay(c cache.Cache, r reconcile.TypedReconciler[reconcile.Request]) (_ controller.Controller, err error) {
	defer func() {
		// A WatchesSource func that panics, or a controller-runtime
		// release whose builder calls a manager method incarnationHost
		// lacks: an error (a failed Build, or a failed Run the supervisor
		// handles), not a crash.
		if v := recover(); v != nil {
			err = fmt.Errorf("ctrlruntime: building the controller panicked: %v", v)
		}
	}()
	host := &incarnationHost{cache: c, ctx: b.ctx}
	u := builder.ControllerManagedBy(host)
	for _, s := range b.steps {
		u = s(u, c)
	}
	return u.Build(r)
}

// needLeaderElection is the controller's NeedLeaderElection: WithOptions',
// else the controller default of the Manager whose Context it is built on,
// else true.
func (b *Builder) needLeaderElection() bool {
	if b.opts.NeedLeaderElection != nil {
		return *b.opts.NeedLeaderElection
	}
	return b.ctx.defaults.needLeaderElection()
}

// recoverPanic is the controller's RecoverPanic: WithOptions', else the
// controller default of the Manager whose Context it is built on, else nil
// (true).
func (b *Builder) recoverPanic() *bool {
	if b.opts.RecoverPanic != nil {
		return b.opts.RecoverPanic
	}
	if d := b.ctx.defaults; d != nil {
		return d.controller.RecoverPanic
	}
	return nil
}

// warmKind notes a watched kind for the pre-flight, as its informer will
// hold it: metadata only with builder.OnlyMetadata.
func (b *Builder) warmKind(obj client.Object, metadata bool) {
	if obj == nil || b.ctx == nil || b.up != nil {
		return
	}
	if metadata {
		if projected, err := asMetadata(obj, b.ctx.scheme); err == nil {
			obj = projected
		}
	}
	b.warm = append(b.warm, obj)
}

// upCache is the cache of the other manager the builder forwards to.
func (b *Builder) upCache() cache.Cache { return b.upMgr.GetCache() }

// metadataOnly says whether builder.OnlyMetadata is among opts.
func metadataOnly[option any](opts []option) bool {
	for _, o := range opts {
		if any(o) == any(builder.OnlyMetadata) {
			return true
		}
	}
	return false
}

// asMetadata is obj as a metadata-only watch holds it, as
// controller-runtime's builder projects it.
func asMetadata(obj client.Object, scheme *runtime.Scheme) (client.Object, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m, nil
}

// incarnationHost is the manager.Manager controller-runtime's builder
// builds one incarnation on: the incarnation's cache, the Context's
// scheme and mapper, and the logger and controller defaults of the
// Manager whose Context it is, if any. The
// builder calls nothing else; Add keeps nothing, the incarnation starts the
// controller itself.
type incarnationHost struct {
	manager.Manager // nil: any other method is a bug of this package, and panics
	cache           cache.Cache
	ctx             *Context
}

func (h *incarnationHost) GetCache() cache.Cache          { return h.cache }
func (h *incarnationHost) GetScheme() *runtime.Scheme     { return h.ctx.GetScheme() }
func (h *incarnationHost) GetRESTMapper() meta.RESTMapper { return h.ctx.GetRESTMapper() }
func (h *incarnationHost) GetClient() client.Client       { return h.ctx.GetClient() }
func (h *incarnationHost) Add(manager.Runnable) error     { return nil }
func (h *incarnationHost) GetLogger() logr.Logger         { return h.logger() }
func (h *incarnationHost) GetControllerOptions() config.Controller {
	var o config.Controller
	if d := h.ctx.defaults; d != nil {
		o = d.controller
	}
	if o.Logger.GetSink() == nil {
		o.Logger = h.logger()
	}
	o.RecoverPanic, o.EnableWarmup, o.SkipNameValidation = ptr.To(true), ptr.To(true), ptr.To(true)
	return o
}

func (h *incarnationHost) logger() logr.Logger {
	if d := h.ctx.defaults; d != nil {
		return d.logger
	}
	return logr.Discard()
}
