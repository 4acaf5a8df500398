package controllermanager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// stalledEvents is a clientset whose Event writes of routine reasons wait
// until the test lets them go: a backlog of routine Events behind a
// clientset's rate limit (5 requests a second), made to last. The loss's
// Events (LeaderLost, ShardLost, Escalated) are written at once.
type stalledEvents struct {
	kubernetes.Interface
	gate <-chan struct{}

	mu      sync.Mutex
	written []string // reasons, in the order written
}

func (c *stalledEvents) CoreV1() typedcorev1.CoreV1Interface {
	return stalledCore{CoreV1Interface: c.Interface.CoreV1(), c: c}
}

type stalledCore struct {
	typedcorev1.CoreV1Interface
	c *stalledEvents
}

func (s stalledCore) Events(namespace string) typedcorev1.EventInterface {
	return stalledEventWrites{EventInterface: s.CoreV1Interface.Events(namespace), c: s.c}
}

type stalledEventWrites struct {
	typedcorev1.EventInterface
	c *stalledEvents
}

func (w stalledEventWrites) wait(reason string) {
	switch reason {
	case cm.EventReasonLeaderLost, cm.EventReasonShardLost, cm.EventReasonEscalated:
	default:
		<-w.c.gate
	}
	w.c.mu.Lock()
	w.c.written = append(w.c.written, reason)
	w.c.mu.Unlock()
}

// The recorder writes through the expansion's *WithEventNamespace calls.
func (w stalledEventWrites) CreateWithEventNamespace(e *corev1.Event) (*corev1.Event, error) {
	w.wait(e.Reason)
	return w.EventInterface.CreateWithEventNamespace(e)
}

func (w stalledEventWrites) CreateWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event) (*corev1.Event, error) {
	w.wait(e.Reason)
	return w.EventInterface.CreateWithEventNamespaceWithContext(ctx, e)
}

func (w stalledEventWrites) PatchWithEventNamespace(e *corev1.Event, data []byte) (*corev1.Event, error) {
	w.wait(e.Reason)
	return w.EventInterface.PatchWithEventNamespace(e, data)
}

func (w stalledEventWrites) PatchWithEventNamespaceWithContext(ctx context.Context, e *corev1.Event, data []byte) (*corev1.Event, error) {
	w.wait(e.Reason)
	return w.EventInterface.PatchWithEventNamespaceWithContext(ctx, e, data)
}

func (c *stalledEvents) wrote(reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.written {
		if r == reason {
			return true
		}
	}
	return false
}

// Issue 34 §5: a lease lost while routine Events are queued behind a slow
// clientset still gets its LeaderLost Event written, at once; what the
// manager stops with still queued is counted in
// controllermanager_kube_events_dropped_total. Before, every Event waited
// in one queue: the LeaderLost queued behind the routine ones was never
// written (the flush at stop gave up after 5s and dropped it), and nothing
// counted it.
func TestKubeEventsTheLossGoesFirst(t *testing.T) {
	gate := make(chan struct{})
	srv := leasetest.NewServer()
	client := &stalledEvents{Interface: srv.Client("a"), gate: gate}
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	t.Cleanup(release)
	m, err := cm.NewControllerManager(cm.NewContext(client), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "",
		cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	t.Cleanup(func() {
		release()
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	m.Add(&metricsController{name: "cron"})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	// Routine Events are queued now (LeaderElection, LeaderElected), the
	// writer stuck on the first of them.

	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", time.Hour))
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the manager did not stop on its lost lease")
	}
	require.ErrorIs(t, m.Err(), cm.ErrLeaseLost)
	require.True(t, testchild.Eventually(elWait, func() bool { return client.wrote(cm.EventReasonLeaderLost) }),
		"the LeaderLost Event was not written while routine ones were queued: %v", client.snapshot())

	// The routine Events still queued when the flush gives up (5s after
	// the manager stopped) are dropped, and counted.
	dropped := func() float64 {
		n, err := testutil.GatherAndCount(m.Gatherer(), "controllermanager_kube_events_dropped_total")
		require.NoError(t, err)
		if n == 0 {
			return 0
		}
		mfs, err := m.Gatherer().Gather()
		require.NoError(t, err)
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == "controllermanager_kube_events_dropped_total" {
				for _, mt := range mf.GetMetric() {
					sum += mt.GetCounter().GetValue()
					for _, l := range mt.GetLabel() {
						assert.NotEqual(t, cm.EventReasonLeaderLost, l.GetValue(), "the loss's Event is not among the dropped")
					}
				}
			}
		}
		return sum
	}
	require.True(t, testchild.Eventually(elWait+5*time.Second, func() bool { return dropped() > 0 }), "no dropped Event counted")
	release()
}

func (c *stalledEvents) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.written...)
}
