package statespace

import (
	"context"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

// stallingClient is the replica's clientset with watches that can stop
// delivering without closing (DoStallWatch), as behind a stuck watch cache
// or a proxy that holds the stream: while stalled is set, every Lease watch,
// open or opened meanwhile, drops its events; once it is cleared they flow
// again, those dropped lost. Reads and writes are untouched: the elector's
// safety must come from reading before it writes, a watch may only make it
// faster (docs/leader-election.md).
type stallingClient struct {
	*leasetest.Client
	stalled *atomic.Bool
	dropped *atomic.Int64 // counts the events dropped
}

func (c stallingClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return stallingCoordination{CoordinationV1Interface: c.Client.CoordinationV1(), stalled: c.stalled, dropped: c.dropped}
}

type stallingCoordination struct {
	coordinationv1client.CoordinationV1Interface
	stalled *atomic.Bool
	dropped *atomic.Int64
}

func (s stallingCoordination) Leases(namespace string) coordinationv1client.LeaseInterface {
	return stallingLeases{LeaseInterface: s.CoordinationV1Interface.Leases(namespace), stalled: s.stalled, dropped: s.dropped}
}

type stallingLeases struct {
	coordinationv1client.LeaseInterface
	stalled *atomic.Bool
	dropped *atomic.Int64
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

func (w *stallingWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.inner.Stop()
	})
}
