package statespace

import (
	"context"
	"sync"
	"sync/atomic"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

// stallingClient is the replica's clientset with watches that can stop
// delivering without closing (DoStallWatch), as behind a stuck watch cache
// or a proxy that holds the stream: while stalled is set, every Lease watch,
// open or opened meanwhile, drops its events; once it is cleared they flow
// again, those dropped lost. And with Lease lists that the API server does
// not answer (DoHangList): while listsHung is shut, a List waits until it
// opens or the caller's context ends. Gets and writes are untouched: the
// elector's safety must come from reading before it writes, a watch or a
// list may only make it faster (docs/leader-election.md).
type stallingClient struct {
	*leasetest.Client
	stalled   *atomic.Bool
	dropped   *atomic.Int64 // counts the events dropped
	listsHung *gate
}

func (c stallingClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return stallingCoordination{CoordinationV1Interface: c.Client.CoordinationV1(), stalled: c.stalled, dropped: c.dropped, listsHung: c.listsHung}
}

type stallingCoordination struct {
	coordinationv1client.CoordinationV1Interface
	stalled   *atomic.Bool
	dropped   *atomic.Int64
	listsHung *gate
}

func (s stallingCoordination) Leases(namespace string) coordinationv1client.LeaseInterface {
	return stallingLeases{LeaseInterface: s.CoordinationV1Interface.Leases(namespace), stalled: s.stalled, dropped: s.dropped, listsHung: s.listsHung}
}

type stallingLeases struct {
	coordinationv1client.LeaseInterface
	stalled   *atomic.Bool
	dropped   *atomic.Int64
	listsHung *gate
}

func (s stallingLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if err := s.listsHung.pass(ctx); err != nil {
		return nil, err
	}
	return s.LeaseInterface.List(ctx, opts)
}

func (s stallingLeases) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := s.LeaseInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	sw := &stallingWatch{inner: w, out: make(chan watch.Event), done: make(chan struct{})}
	go sw.forward(s.stalled, s.dropped)
	return sw, nil
}

// stallingWatch forwards its inner watch's events, but for those that come
// while stalled, and closes with it.
type stallingWatch struct {
	inner watch.Interface
	out   chan watch.Event
	done  chan struct{}
	once  sync.Once
}

func (w *stallingWatch) forward(stalled *atomic.Bool, dropped *atomic.Int64) {
	defer close(w.out)
	for ev := range w.inner.ResultChan() {
		if stalled.Load() {
			dropped.Add(1)
			continue
		}
		select {
		case w.out <- ev:
		case <-w.done:
			w.inner.Stop()
			for range w.inner.ResultChan() { // until the inner watch closes
			}
			return
		}
	}
}

func (w *stallingWatch) ResultChan() <-chan watch.Event { return w.out }

// gate holds whoever passes it while shut, until it opens or their
// context ends; it counts those it held.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil: open; closed when it opens
	held atomic.Int64
}

// set shuts the gate, or opens it and lets everyone through.
func (g *gate) set(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case shut && g.shut == nil:
		g.shut = make(chan struct{})
	case !shut && g.shut != nil:
		close(g.shut)
		g.shut = nil
	}
}

// pass returns once the gate is open, or ctx's error if ctx ends first.
func (g *gate) pass(ctx context.Context) error {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut == nil {
		return nil
	}
	g.held.Add(1)
	select {
	case <-shut:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *stallingWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.inner.Stop()
	})
}
