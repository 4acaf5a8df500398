package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	cm "github.com/actorkube/controllermanager"
)

// ContextOptions configures NewContext. Its zero value works: every field
// states its default.
type ContextOptions struct {
	// Scheme maps Go types to kinds for the cache and the client. Default:
	// client-go's scheme (the built-in kinds), as controller-runtime's
	// manager has.
	Scheme *runtime.Scheme
	// Cache configures the shared cache (namespaces, selectors, transforms,
	// resync). Its Scheme, Mapper and HTTPClient are filled from this
	// Context when nil.
	Cache cache.Options
	// Client configures the client. Its Scheme, Mapper and HTTPClient are
	// filled from this Context when nil; Cache.Reader, when nil, is the
	// shared cache: reads come from it and writes go to the API server, as
	// with a manager's GetClient.
	Client client.Options
	// Registerer, when not nil, gets controller-runtime's metrics (reconcile
	// counts and latencies, workqueue, client-go requests): see
	// MetricsCollector. Pass the Registerer given to the manager with
	// controllermanager.WithRegisterer. Default: nil, controller-runtime's
	// metrics stay on its global registry only.
	Registerer prometheus.Registerer
}

// Context is a controllermanager.Context for controller-runtime code: it
// carries the one cache, client, scheme and REST mapper that every
// reconciler, runnable and webhook of a manager shares, and the clientset
// of the leader-election Lease. It is what a controller-runtime
// manager.Manager offers through GetCache, GetClient and GetScheme.
//
// The cache is started by Start, the manager's pre-flight, before the
// election: on a standby replica the informers of every kind a reconciler
// watches are listed and watched while it waits for the lease, so a
// failover starts reconciling from a warm cache, without a relist. Stop it
// with Stop once the manager has shut down.
//
// A Context may be shared by several managers (a ControllerManager and a
// WebhookManager of one process): the cache starts once.
type Context struct {
	config     *rest.Config
	httpClient *http.Client
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	cache      cache.Cache
	client     client.Client
	kubernetes kubernetes.Interface
	// defaults are the controller defaults of the Manager this is the
	// Context of (manager.Options.Controller, and its logger); nil for a
	// Context of its own.
	defaults *managerDefaults

	mu        sync.Mutex
	warming   sync.WaitGroup  // Warm's informer starts after Start
	warm      []client.Object // kinds whose informers Start starts
	started   bool
	cancel    context.CancelFunc
	cacheDone chan struct{}
	cacheErr  error // what cache.Start returned, once cacheDone is closed
}

var _ cm.Context = (*Context)(nil)

// NewContext builds the shared cache, client and clientset for the API
// server at config. Nothing contacts the server before Start, except the
// REST mapper's lazy discovery.
func NewContext(config *rest.Config, opts ContextOptions) (*Context, error) {
	if config == nil {
		return nil, errors.New("ctrlruntime: NewContext: config is nil")
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: http client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: rest mapper: %w", err)
	}
	copts := opts.Cache
	if copts.Scheme == nil {
		copts.Scheme = scheme
	}
	if copts.Mapper == nil {
		copts.Mapper = mapper
	}
	if copts.HTTPClient == nil {
		copts.HTTPClient = httpClient
	}
	informers, err := cache.New(config, copts)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: cache: %w", err)
	}
	clopts := opts.Client
	if clopts.Scheme == nil {
		clopts.Scheme = scheme
	}
	if clopts.Mapper == nil {
		clopts.Mapper = mapper
	}
	if clopts.HTTPClient == nil {
		clopts.HTTPClient = httpClient
	}
	if clopts.Cache == nil {
		clopts.Cache = &client.CacheOptions{Reader: informers}
	} else if clopts.Cache.Reader == nil {
		cacheOpts := *clopts.Cache
		cacheOpts.Reader = informers
		clopts.Cache = &cacheOpts
	}
	cl, err := client.New(config, clopts)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: client: %w", err)
	}
	clientset, err := kubernetes.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: clientset: %w", err)
	}
	if opts.Registerer != nil {
		if err := RegisterMetrics(opts.Registerer); err != nil {
			return nil, err
		}
	}
	return &Context{
		config: config, httpClient: httpClient, scheme: scheme, mapper: mapper,
		cache: informers, client: cl, kubernetes: clientset,
	}, nil
}

// Warm adds kinds whose informers Start starts, so that they are synced
// before the election. The builder calls it with every kind a reconciler
// watches; call it for the kinds of a NewTyped reconciler's sources or of a
// runnable. After Start the informers start at once, without waiting.
func (c *Context) Warm(objs ...client.Object) {
	c.mu.Lock()
	c.warm = append(c.warm, objs...)
	started := c.started
	c.mu.Unlock()
	if started && len(objs) > 0 {
		// Not blocking: the informer syncs in the background; a
		// reconciler's Run waits for it. Nor is its start: creating an
		// informer maps its kind, and controller-runtime's REST mapper
		// asks the API server's discovery, with no context, when the
		// kind is new to it; an API server that does not answer (a
		// network cut) would hold Warm's caller, a Complete after Start,
		// until the transport gave up.
		c.warming.Go(func() {
			for _, obj := range objs {
				_, _ = c.cache.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
			}
		})
	}
}

// Start starts the shared cache, once, then starts the informer of every
// kind given to Warm and waits until all have synced or ctx ends. A kind
// with no REST mapping yet (a CRD not yet established) is left out: its
// informer starts when a reconciler's source asks for it. The cache
// runs on until Stop, whatever ctx does: a manager cancels the context of
// its pre-flight once the pre-flight is over.
func (c *Context) Start(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.started = true
		cacheCtx, cancel := context.WithCancel(context.Background())
		c.cancel, c.cacheDone = cancel, make(chan struct{})
		go func() {
			defer close(c.cacheDone)
			err := c.cache.Start(cacheCtx)
			c.mu.Lock()
			c.cacheErr = err
			c.mu.Unlock()
		}()
	}
	warm := append([]client.Object(nil), c.warm...)
	done := c.cacheDone
	c.mu.Unlock()

	for _, obj := range warm {
		if _, err := c.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err != nil {
			if meta.IsNoMatchError(err) {
				// A kind the API server does not serve yet (a CRD applied
				// with the Deployment, not yet established) does not hold
				// the manager back, as under controller-runtime, whose
				// manager starts and whose controller of that kind
				// retries its informer: so does the reconciler's source
				// here, within its CacheSyncTimeout.
				continue
			}
			return fmt.Errorf("ctrlruntime: informer for %s: %w", c.kindOf(obj), err)
		}
	}
	synced := make(chan bool, 1)
	go func() { synced <- c.cache.WaitForCacheSync(ctx) }()
	select {
	case ok := <-synced:
		if !ok {
			return fmt.Errorf("ctrlruntime: caches did not sync: %w", context.Cause(ctx))
		}
		return nil
	case <-done:
		c.mu.Lock()
		err := c.cacheErr
		c.mu.Unlock()
		if err != nil {
			return fmt.Errorf("ctrlruntime: cache failed: %w", err)
		}
		// A cache whose Start returns at once (a fake) may still sync.
		if !<-synced {
			return fmt.Errorf("ctrlruntime: caches did not sync: %w", context.Cause(ctx))
		}
		return nil
	}
}

// Stop stops the shared cache and waits until its informers have stopped
// or ctx ends. Call it after the managers using this Context have shut
// down; a Context that was never started has nothing to stop.
func (c *Context) Stop(ctx context.Context) {
	c.mu.Lock()
	cancel, done := c.cancel, c.cacheDone
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	warmed := make(chan struct{})
	go func() {
		c.warming.Wait()
		close(warmed)
	}()
	for _, ch := range []chan struct{}{done, warmed} {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// Kubernetes is the clientset of the leader-election Lease, on the same
// HTTP client as the cache and the client.
func (c *Context) Kubernetes() kubernetes.Interface { return c.kubernetes }

// GetCache is the shared cache, as manager.Manager's GetCache.
func (c *Context) GetCache() cache.Cache { return c.cache }

// GetClient reads from the shared cache and writes to the API server, as
// manager.Manager's GetClient.
func (c *Context) GetClient() client.Client { return c.client }

// GetScheme is the scheme of the cache and the client.
func (c *Context) GetScheme() *runtime.Scheme { return c.scheme }

// GetRESTMapper is the REST mapper of the cache and the client.
func (c *Context) GetRESTMapper() meta.RESTMapper { return c.mapper }

// GetConfig is the rest.Config the Context was built from.
func (c *Context) GetConfig() *rest.Config { return c.config }

// GetHTTPClient is the HTTP client shared by the cache, the client and the
// clientset.
func (c *Context) GetHTTPClient() *http.Client { return c.httpClient }

// kindOf names obj's kind for messages: its GroupVersionKind's Kind, or its
// Go type when the scheme does not know it.
func (c *Context) kindOf(obj runtime.Object) string {
	return kindName(c.scheme, obj)
}

func kindName(scheme *runtime.Scheme, obj runtime.Object) string {
	if scheme != nil {
		if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
			return gvkString(gvk)
		}
	}
	return fmt.Sprintf("%T", obj)
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Kind
	}
	return gvk.Kind + "." + gvk.Group
}

// NewContextWith returns a Context over parts built elsewhere (a cache and
// client of a manager.Manager being migrated, fakes in tests). It does not
// register metrics; use RegisterMetrics. scheme nil means client-go's;
// clientset may be nil where election is off.
func NewContextWith(informers cache.Cache, cl client.Client, scheme *runtime.Scheme, clientset kubernetes.Interface) (*Context, error) {
	var errs []error
	if informers == nil {
		errs = append(errs, errors.New("cache is nil"))
	}
	if cl == nil {
		errs = append(errs, errors.New("client is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: NewContextWith: %w", err)
	}
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	return &Context{scheme: scheme, mapper: cl.RESTMapper(), cache: informers, client: cl, kubernetes: clientset}, nil
}

// clusterCache is a cluster's cache whose Start runs the cluster's: the
// cache, then, once it stops, the cluster's event recorders.
type clusterCache struct {
	cache.Cache
	cluster cluster.Cluster
}

func (c clusterCache) Start(ctx context.Context) error { return c.cluster.Start(ctx) }

// newContextForCluster is the Context of a Manager: the cache, client,
// mapper and recorders of a controller-runtime cluster, built as
// controller-runtime's manager builds them, so that every cluster option
// (NewCache, NewClient, MapperProvider, EventBroadcaster) means what it
// means there. Its Start starts the cluster; its Stop stops it.
func newContextForCluster(config *rest.Config, cl cluster.Cluster, clientset kubernetes.Interface, defaults *managerDefaults) *Context {
	return &Context{
		config: config, httpClient: cl.GetHTTPClient(), scheme: cl.GetScheme(), mapper: cl.GetRESTMapper(),
		cache: clusterCache{Cache: cl.GetCache(), cluster: cl}, client: cl.GetClient(), kubernetes: clientset,
		defaults: defaults,
	}
}
