package leasetest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Latency is how long a Client's Lease calls take: an API server that
// answers slowly, for tests of an election under load. A call's delay is
// the sum of its verb's, its Lease's and a random share of Jitter.
type Latency struct {
	// Verbs is the delay per verb: "get", "list", "create", "update",
	// "watch" (before the watch starts; its events are not delayed).
	Verbs map[string]time.Duration
	// Leases is the delay per Lease name, added to every call that names
	// one (get, create, update).
	Leases map[string]time.Duration
	// Jitter adds a uniformly random delay in [0, Jitter) to every call.
	Jitter time.Duration
}

// SetLatency makes c's Lease calls take l from now on, and the zero
// Latency none.
//
// A delayed call reaches the server at the end of its delay, and is
// answered then. The delay is waited out before the fake clientset's own
// lock (which serialises a Client's reactors), so that slow calls of one
// Client overlap as they do against a real API server. When the call's
// context ends first, the caller gets the context's error at once, and the
// call still reaches the server at the end of its delay, as a request whose
// answer the client stopped waiting for: a write that timed out may have
// been written.
func (c *Client) SetLatency(l Latency) {
	if len(l.Verbs) == 0 && len(l.Leases) == 0 && l.Jitter <= 0 {
		c.latency.Store(nil)
		return
	}
	l.Verbs, l.Leases = maps.Clone(l.Verbs), maps.Clone(l.Leases)
	c.latency.Store(&l)
}

func (l *Latency) of(verb, name string) time.Duration {
	if l == nil {
		return 0
	}
	d := l.Verbs[verb] + l.Leases[name]
	if l.Jitter > 0 {
		d += rand.N(l.Jitter)
	}
	return d
}

// CoordinationV1 is the fake clientset's, with c's latency (SetLatency)
// applied to its Lease calls.
func (c *Client) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return slowCoordination{CoordinationV1Interface: c.Clientset.CoordinationV1(), c: c}
}

type slowCoordination struct {
	coordinationv1client.CoordinationV1Interface
	c *Client
}

func (s slowCoordination) Leases(namespace string) coordinationv1client.LeaseInterface {
	return slowLeases{LeaseInterface: s.CoordinationV1Interface.Leases(namespace), c: s.c}
}

// slowLeases delays the Lease calls the elections make.
type slowLeases struct {
	coordinationv1client.LeaseInterface
	c *Client
}

// delayed runs call after the latency of verb on name, unless there is
// none; see SetLatency. discard, when not nil, disposes of an answer that
// came after the caller stopped waiting.
func delayed[T any](ctx context.Context, c *Client, verb, name string, call func() (T, error), discard func(T)) (T, error) {
	d := c.latency.Load().of(verb, name)
	if d <= 0 {
		return call()
	}
	type answer struct {
		v   T
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		time.Sleep(d) // the server's time to answer
		v, err := call()
		answered <- answer{v, err}
	}()
	select {
	case a := <-answered:
		return a.v, a.err
	case <-ctx.Done():
		if discard != nil {
			go func() {
				if a := <-answered; a.err == nil {
					discard(a.v)
				}
			}()
		}
		var zero T
		return zero, fmt.Errorf("leasetest: %s %s after %s: %w", verb, name, d, ctx.Err())
	}
}

func (s slowLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	return delayed(ctx, s.c, "get", name, func() (*coordinationv1.Lease, error) { return s.LeaseInterface.Get(ctx, name, opts) }, nil)
}

func (s slowLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	return delayed(ctx, s.c, "list", "", func() (*coordinationv1.LeaseList, error) { return s.LeaseInterface.List(ctx, opts) }, nil)
}

func (s slowLeases) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return delayed(ctx, s.c, "create", l.Name, func() (*coordinationv1.Lease, error) { return s.LeaseInterface.Create(ctx, l, opts) }, nil)
}

func (s slowLeases) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return delayed(ctx, s.c, "update", l.Name, func() (*coordinationv1.Lease, error) { return s.LeaseInterface.Update(ctx, l, opts) }, nil)
}

func (s slowLeases) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return delayed(ctx, s.c, "watch", "", func() (watch.Interface, error) { return s.LeaseInterface.Watch(ctx, opts) },
		func(w watch.Interface) { w.Stop() })
}
