package ctrlruntime

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
)

// Builder declares a reconciler the way controller-runtime's
// builder.ControllerManagedBy does: the kind it is For, the kinds it Owns,
// other Watches, then Complete with the reconcile.Reconciler. What it
// builds is a *Controller to Add to a controllermanager.ControllerManager,
// not a controller added to a manager.Manager.
type Builder struct {
	ctx     *Context
	mgr     *Manager // nil: built on a Context, Build only
	name    string
	forObj  client.Object
	forOpts watchOptions
	owns    []ownsInput
	watches []watchesInput
	raw     []TypedSource[reconcile.Request]
	opts    Options
	shard   cm.Shard // ForShard's; Count < 2: every key
	errs    []error
}

type ownsInput struct {
	obj  client.Object
	opts watchOptions
}

type watchesInput struct {
	obj     client.Object
	handler handler.EventHandler
	opts    watchOptions
}

// WatchOption configures one For, Owns or Watches.
type WatchOption func(*watchOptions)

type watchOptions struct {
	predicates      []predicate.Predicate
	matchEveryOwner bool
}

// WithPredicates filters the events of one For, Owns or Watches, as
// builder.WithPredicates does.
func WithPredicates(preds ...predicate.Predicate) WatchOption {
	return func(o *watchOptions) { o.predicates = append(o.predicates, preds...) }
}

// MatchEveryOwner makes an Owns enqueue the object's every owner of the For
// kind, not only its controller owner, as builder.MatchEveryOwner does.
func MatchEveryOwner() WatchOption {
	return func(o *watchOptions) { o.matchEveryOwner = true }
}

// Host is what NewControllerManagedBy builds on: a *Manager, also when it
// is held as the manager.Manager a SetupWithManager is given, or a
// *Context. Both have the shared cache and scheme.
type Host interface {
	GetCache() cache.Cache
	GetScheme() *runtime.Scheme
}

// NewControllerManagedBy starts declaring a reconciler on the shared cache
// of host: the counterpart of ctrl.NewControllerManagedBy(mgr), and the
// only line of a kubebuilder SetupWithManager(mgr ctrl.Manager) that
// changes. On a *Manager, Complete adds the reconciler to it, as a
// supervised child restarted alone; on a *Context, Build returns it, to Add
// to a ControllerManager. Any other manager.Manager (controller-runtime's
// own) is an error at Complete: it cannot host a restartable reconciler.
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
		b.errs = append(b.errs, errors.New("host is nil: give a *ctrlruntime.Manager or a *ctrlruntime.Context"))
	default:
		b.errs = append(b.errs, fmt.Errorf("%T is neither a *ctrlruntime.Manager nor a *ctrlruntime.Context: build the manager with ctrlruntime.NewManager", host))
	}
	return b
}

// Named sets the reconciler's name (its child name and metrics label).
// Default: the For kind, lower-cased, as controller-runtime names it.
func (b *Builder) Named(name string) *Builder {
	b.name = name
	return b
}

// For sets the kind reconciled: each of its events enqueues the object's own
// namespace and name. It may be given once.
func (b *Builder) For(obj client.Object, opts ...WatchOption) *Builder {
	if b.forObj != nil {
		b.errs = append(b.errs, errors.New("For given more than once"))
		return b
	}
	if obj == nil {
		b.errs = append(b.errs, errors.New("For: object is nil"))
		return b
	}
	b.forObj = obj
	b.forOpts = collectWatchOptions(opts)
	return b
}

// Owns watches a kind the reconciler creates: each of its events enqueues
// the object's controller owner of the For kind (every owner of that kind
// with MatchEveryOwner).
func (b *Builder) Owns(obj client.Object, opts ...WatchOption) *Builder {
	if obj == nil {
		b.errs = append(b.errs, fmt.Errorf("Owns #%d: object is nil", len(b.owns)))
		return b
	}
	b.owns = append(b.owns, ownsInput{obj: obj, opts: collectWatchOptions(opts)})
	return b
}

// Watches watches a kind whose events h maps to requests (for example
// handler.EnqueueRequestsFromMapFunc).
func (b *Builder) Watches(obj client.Object, h handler.EventHandler, opts ...WatchOption) *Builder {
	switch {
	case obj == nil:
		b.errs = append(b.errs, fmt.Errorf("Watches #%d: object is nil", len(b.watches)))
	case h == nil:
		b.errs = append(b.errs, fmt.Errorf("Watches #%d: handler is nil", len(b.watches)))
	default:
		b.watches = append(b.watches, watchesInput{obj: obj, handler: h, opts: collectWatchOptions(opts)})
	}
	return b
}

// WatchesRawSource adds a source built per incarnation (a channel, a timer,
// a kind with a typed handler): see TypedSource.
func (b *Builder) WatchesRawSource(src TypedSource[reconcile.Request]) *Builder {
	if src == nil {
		b.errs = append(b.errs, fmt.Errorf("WatchesRawSource #%d: source is nil", len(b.raw)))
		return b
	}
	b.raw = append(b.raw, src)
	return b
}

// WithOptions sets the reconciler's options.
func (b *Builder) WithOptions(opts Options) *Builder {
	b.opts = opts
	return b
}

// Complete builds the reconciler and adds it to the Manager given to
// NewControllerManagedBy, as controller-runtime's Complete does; every
// problem of the declaration is in the error. On a Context, use Build.
func (b *Builder) Complete(r reconcile.Reconciler) error {
	if b.mgr == nil && len(b.errs) == 0 {
		return errors.New("ctrlruntime: Complete adds the reconciler to a Manager, and this builder is on a Context: use Build, then the ControllerManager's Add")
	}
	ctrl, err := b.Build(r)
	if err != nil {
		return err
	}
	return b.mgr.addChild(ctrl)
}

// Build builds the reconciler, to Add to a manager; every problem of the
// declaration is in the error. The kinds watched are given to the
// Context's Warm, so their informers sync in the pre-flight. On a Manager,
// the options left zero take the manager's controller defaults
// (manager.Options.Controller) and its logger, and the reconciler logs
// with controller-runtime's fields: controller, controllerGroup,
// controllerKind, the For kind's name with the object's key, namespace,
// name and reconcileID.
func (b *Builder) Build(r reconcile.Reconciler) (*Controller, error) {
	errs := append([]error(nil), b.errs...)
	if r == nil {
		errs = append(errs, errors.New("reconciler is nil"))
	}
	if b.forObj == nil && len(b.owns) > 0 {
		errs = append(errs, errors.New("Owns needs For: the owner kind"))
	}
	if b.forObj == nil && len(b.watches) == 0 && len(b.raw) == 0 {
		errs = append(errs, errors.New("nothing watched: give For, Watches or WatchesRawSource"))
	}
	name := b.name
	if name == "" && b.forObj != nil && b.ctx != nil {
		kind := b.ctx.kindOf(b.forObj)
		name = strings.ToLower(strings.SplitN(kind, ".", 2)[0])
	}
	if name == "" && len(errs) == 0 {
		errs = append(errs, errors.New("no name: give Named, or For"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: reconciler %q: %w", name, err)
	}

	var sources []TypedSource[reconcile.Request]
	var warm []client.Object
	if b.forObj != nil {
		obj, preds := b.forObj, b.forOpts.predicates
		sources = append(sources, func(c cache.Cache) source.TypedSource[reconcile.Request] {
			return source.Kind(c, obj, &handler.EnqueueRequestForObject{}, preds...)
		})
		warm = append(warm, obj)
	}
	for _, o := range b.owns {
		var hopts []handler.OwnerOption
		if !o.opts.matchEveryOwner {
			hopts = append(hopts, handler.OnlyControllerOwner())
		}
		h, err := ownerHandler(b.ctx, b.forObj, hopts)
		if err != nil {
			return nil, fmt.Errorf("ctrlruntime: reconciler %q: Owns %s: %w", name, b.ctx.kindOf(o.obj), err)
		}
		obj, preds := o.obj, o.opts.predicates
		sources = append(sources, func(c cache.Cache) source.TypedSource[reconcile.Request] {
			return source.Kind(c, obj, h, preds...)
		})
		warm = append(warm, obj)
	}
	for _, w := range b.watches {
		obj, h, preds := w.obj, w.handler, w.opts.predicates
		sources = append(sources, func(c cache.Cache) source.TypedSource[reconcile.Request] {
			return source.Kind(c, obj, h, preds...)
		})
		warm = append(warm, obj)
	}
	sources = append(sources, b.raw...)
	opts := b.opts
	if b.mgr != nil {
		opts = b.mgr.controllerDefaults(opts, b.forGVK())
	}
	if opts.LogConstructor == nil {
		opts.LogConstructor = logConstructor(opts.Logger, name, b.forGVK())
	}
	ctrl, err := New(b.ctx, name, ShardReconciler(b.shard, r), opts, sources...)
	if err != nil {
		return nil, err
	}
	b.ctx.Warm(warm...)
	return ctrl, nil
}

// forGVK is the For kind, when the scheme knows it.
func (b *Builder) forGVK() *schema.GroupVersionKind {
	if b.forObj == nil || b.ctx == nil {
		return nil
	}
	gvk, err := apiutil.GVKForObject(b.forObj, b.ctx.scheme)
	if err != nil {
		return nil
	}
	return &gvk
}

// logConstructor logs as controller-runtime's builder does: the
// controller's name, group and kind, and per request the kind's name with
// the object's key, its namespace and name (controller-runtime adds the
// reconcileID).
func logConstructor(base logr.Logger, name string, gvk *schema.GroupVersionKind) func(*reconcile.Request) logr.Logger {
	if base.GetSink() == nil {
		base = logr.Discard()
	}
	log := base.WithValues("controller", name)
	if gvk != nil {
		log = log.WithValues("controllerGroup", gvk.Group, "controllerKind", gvk.Kind)
	}
	return func(req *reconcile.Request) logr.Logger {
		if req == nil {
			return log
		}
		l := log
		if gvk != nil {
			l = l.WithValues(gvk.Kind, klog.KRef(req.Namespace, req.Name))
		}
		return l.WithValues("namespace", req.Namespace, "name", req.Name)
	}
}

func collectWatchOptions(opts []WatchOption) watchOptions {
	var o watchOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// ownerHandler is handler.EnqueueRequestForOwner, whose panic on a For kind
// the scheme does not know becomes an error.
func ownerHandler(ctx *Context, owner client.Object, opts []handler.OwnerOption) (h handler.EventHandler, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("owner kind %T: %v", owner, v)
		}
	}()
	return handler.EnqueueRequestForOwner(ctx.scheme, ctx.mapper, owner, opts...), nil
}
