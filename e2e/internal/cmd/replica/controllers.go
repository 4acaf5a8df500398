package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// activity journals a controller's incarnations: Run called, running, Shutdown called,
// stopped. The active interval the tests check is running → Shutdown called; the wider
// Run called → stopped is checked too.
type activity struct {
	name string
	rec  *journal.Writer

	mu          sync.Mutex
	incarnation int
}

func (a *activity) runCalled() int {
	a.mu.Lock()
	a.incarnation++
	n := a.incarnation
	a.mu.Unlock()
	a.rec.Write(journal.Entry{Kind: journal.RunCalled, Controller: a.name, Incarnation: n})
	return n
}

func (a *activity) current() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.incarnation
}

func (a *activity) write(kind journal.Kind, n int) {
	a.rec.Write(journal.Entry{Kind: kind, Controller: a.name, Incarnation: n})
}

// ticker is a furiko-style controller: Run starts a worker loop and returns; Shutdown
// stops the loop and waits for it.
type ticker struct {
	activity

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func newTicker(name string, rec *journal.Writer) *ticker {
	return &ticker{activity: activity{name: name, rec: rec}}
}

func (c *ticker) Name() string { return c.name }

func (c *ticker) GetHealth() cm.HealthStatus { return cm.HealthStatus{Name: c.name, Healthy: true} }

func (c *ticker) Run(context.Context) error {
	n := c.runCalled()
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-tick.C: // a reconcile pass would go here
			}
		}
	}()
	c.mu.Lock()
	c.cancel, c.done = cancel, done
	c.mu.Unlock()
	c.write(journal.Running, n)
	return nil
}

func (c *ticker) Shutdown(ctx context.Context) {
	n := c.current()
	c.write(journal.ShutdownCalled, n)
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.cancel, c.done = nil, nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	c.write(journal.Stopped, n)
}

// configMapWatcher is a controller over an informer, as most real ones are: Run starts a
// fresh informer factory on the namespace's ConfigMaps and returns once its cache has
// synced; Shutdown stops the factory and waits for its goroutines.
type configMapWatcher struct {
	activity
	client    kubernetes.Interface
	namespace string

	mu      sync.Mutex
	stop    chan struct{}
	factory informers.SharedInformerFactory
}

func newConfigMapWatcher(name string, client kubernetes.Interface, namespace string, rec *journal.Writer) *configMapWatcher {
	return &configMapWatcher{activity: activity{name: name, rec: rec}, client: client, namespace: namespace}
}

func (c *configMapWatcher) Name() string { return c.name }

func (c *configMapWatcher) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

func (c *configMapWatcher) Run(ctx context.Context) error {
	n := c.runCalled()
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithNamespace(c.namespace))
	informer := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	c.mu.Lock()
	c.stop, c.factory = stop, factory
	c.mu.Unlock()
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("configmaps cache not synced: %w", context.Cause(ctx))
	}
	c.write(journal.Running, n)
	return nil
}

func (c *configMapWatcher) Shutdown(ctx context.Context) {
	n := c.current()
	c.write(journal.ShutdownCalled, n)
	c.mu.Lock()
	stop, factory := c.stop, c.factory
	c.stop, c.factory = nil, nil
	c.mu.Unlock()
	if stop != nil {
		close(stop)
		done := make(chan struct{})
		go func() { factory.Shutdown(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	c.write(journal.Stopped, n)
}
