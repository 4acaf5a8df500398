package ctrlruntime

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// incarnationCache is the shared cache as one incarnation of a reconciler
// sees it: every event handler its sources add to a shared informer is
// recorded, and removed when the incarnation shuts down. controller-runtime's
// sources never remove theirs (its controllers are started once per
// process); without this, each restart would leave a dead handler on the
// shared informer.
type incarnationCache struct {
	cache.Cache
	kindOf func(runtime.Object) string

	mu        sync.Mutex
	informers []watchedInformer
	handlers  []handlerRegistration
	closed    bool
	done      chan struct{} // closed by removeHandlers
}

type watchedInformer struct {
	kind     string
	informer cache.Informer
}

type handlerRegistration struct {
	informer cache.Informer
	reg      toolscache.ResourceEventHandlerRegistration
}

func newIncarnationCache(c cache.Cache, kindOf func(runtime.Object) string) *incarnationCache {
	return &incarnationCache{Cache: c, kindOf: kindOf, done: make(chan struct{})}
}

// GetInformer returns the shared informer for obj's kind, recording its
// handlers.
func (c *incarnationCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return c.track(c.kindOf(obj), i), nil
}

// GetInformerForKind returns the shared informer for gvk, recording its
// handlers.
func (c *incarnationCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	return c.track(gvkString(gvk), i), nil
}

func (c *incarnationCache) track(kind string, i cache.Informer) cache.Informer {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := false
	for _, w := range c.informers {
		if w.informer == i {
			seen = true
			break
		}
	}
	if !seen {
		c.informers = append(c.informers, watchedInformer{kind: kind, informer: i})
	}
	return &trackedInformer{Informer: i, owner: c}
}

// unsynced names the kinds whose informers have not synced (or have
// stopped), among those this incarnation's sources watch.
func (c *incarnationCache) unsynced() []string {
	c.mu.Lock()
	informers := append([]watchedInformer(nil), c.informers...)
	c.mu.Unlock()
	var out []string
	for _, w := range informers {
		if w.informer.IsStopped() {
			out = append(out, w.kind+" (informer stopped)")
		} else if !w.informer.HasSynced() {
			out = append(out, w.kind)
		}
	}
	return out
}

func (c *incarnationCache) record(i cache.Informer, reg toolscache.ResourceEventHandlerRegistration) {
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.handlers = append(c.handlers, handlerRegistration{informer: i, reg: reg})
	}
	c.mu.Unlock()
	if closed { // a source that started after its incarnation shut down
		_ = i.RemoveEventHandler(reg)
	}
}

// removeHandlers removes every handler the incarnation added, and any it
// adds from now on.
func (c *incarnationCache) removeHandlers() {
	c.mu.Lock()
	handlers := c.handlers
	if !c.closed {
		close(c.done)
	}
	c.handlers, c.closed = nil, true
	c.mu.Unlock()
	for _, h := range handlers {
		_ = h.informer.RemoveEventHandler(h.reg)
	}
}

// handlerCount is how many handlers the incarnation has on shared informers.
func (c *incarnationCache) handlerCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.handlers)
}

// trackedInformer records the handlers added through it.
type trackedInformer struct {
	cache.Informer
	owner *incarnationCache
}

func (i *trackedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandler(h)
	if err != nil {
		return reg, err
	}
	i.owner.record(i.Informer, reg)
	return notifiedRegistration{reg, i.owner.done}, nil
}

func (i *trackedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithResyncPeriod(h, resync)
	if err != nil {
		return reg, err
	}
	i.owner.record(i.Informer, reg)
	return notifiedRegistration{reg, i.owner.done}, nil
}

func (i *trackedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.Informer.AddEventHandlerWithOptions(h, opts)
	if err != nil {
		return reg, err
	}
	i.owner.record(i.Informer, reg)
	return notifiedRegistration{reg, i.owner.done}, nil
}

// notifiedRegistration is a handler's registration whose HasSynced waits
// for the handler to have received the informer's initial objects, on
// client-go's notification, instead of answering at once.
//
// controller-runtime's source.Kind waits for its handler with
// toolscache.WaitForCacheSync, which polls HasSynced every 100 ms: a
// handler just added to a warm informer has not yet been handed the
// initial objects at the first poll, so every start of a reconciler (a
// warm standby's first after its election, each restart) waited out one
// full period. Here the first poll returns once the handler has synced,
// or false once the incarnation has shut down.
type notifiedRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	stopped <-chan struct{}
}

// HasSynced waits until the handler has synced or its incarnation has
// shut down, and says which.
func (r notifiedRegistration) HasSynced() bool {
	select {
	case <-r.HasSyncedChecker().Done():
		return true
	case <-r.stopped:
		return r.ResourceEventHandlerRegistration.HasSynced()
	}
}
