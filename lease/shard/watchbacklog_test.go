package shard

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// heldLoop is one replica of a single lease on client-go's fake clientset
// whose loop is held in its first Acquired until resume: a loop that has
// fallen behind its watch (a starved goroutine under load), on purpose.
type heldLoop struct {
	t       *testing.T
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	e       *Elector
	resume  chan struct{}
	resumed bool
	lost    chan string // Lost's reasons
}

func newHeldLoop(t *testing.T, backlog int) *heldLoop { return newHeldLoopWith(t, backlog, nil) }

// newHeldLoopWith starts the replica, with backlog if positive, on a fake
// clientset prepare (if set) has been given first, and returns once its
// loop is held in Acquired. Run ends with the test.
func newHeldLoopWith(t *testing.T, backlog int, prepare func(*fake.Clientset)) *heldLoop {
	h := &heldLoop{t: t, client: fake.NewClientset(), clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)),
		resume: make(chan struct{}), lost: make(chan string, 1)}
	if prepare != nil {
		prepare(h.client)
	}
	acquired := make(chan struct{})
	var first sync.Once
	e, err := New(Config{Client: h.client, Namespace: testNamespace, Name: testGroup, Identity: "a", SingleLease: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: h.clock,
		Callbacks: Callbacks{
			// Taken again once b's expires, with the loop running again.
			Acquired: func(int) { first.Do(func() { close(acquired) }); <-h.resume },
			Release:  func(_ int, done func()) { done() },
			Lost: func(_ int, reason string, done func()) {
				select {
				case h.lost <- reason:
				default:
				}
				done()
			},
		}})
	require.NoError(t, err)
	if backlog > 0 {
		e.backlog = backlog
	}
	h.e = e
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	t.Cleanup(func() {
		h.release()
		cancel()
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				h.clock.Step(retryPeriod) // a release that failed is retried each retry period
			}
		}
	})
	select {
	case <-acquired:
	case <-time.After(wait):
		t.Fatal("the replica did not acquire the Lease")
	}
	return h
}

// release lets the loop run again.
func (h *heldLoop) release() {
	if !h.resumed {
		h.resumed = true
		close(h.resume)
	}
}

// writeNoise updates another Lease of the namespace n times (the fakes'
// watches are not filtered by selector), failing at a write that panics.
func (h *heldLoop) writeNoise(n int) {
	ctx := context.Background()
	leases := h.client.CoordinationV1().Leases(testNamespace)
	noise, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "noise", Namespace: testNamespace}}, metav1.CreateOptions{})
	require.NoError(h.t, err)
	write := func(k int) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("write %d of %d panicked in the fake clientset: %v", k, n, p)
			}
		}()
		noise.Annotations = map[string]string{"n": strconv.Itoa(k)}
		noise, err = leases.Update(ctx, noise, metav1.UpdateOptions{})
		return err
	}
	for k := 1; k <= n; k++ {
		require.NoError(h.t, write(k))
	}
}

// giveToB writes b as the holder of the Lease a holds.
func (h *heldLoop) giveToB() {
	ctx := context.Background()
	leases := h.client.CoordinationV1().Leases(testNamespace)
	held, err := leases.Get(ctx, testGroup, metav1.GetOptions{})
	require.NoError(h.t, err)
	held.Spec.HolderIdentity = ptr.To("b")
	_, err = leases.Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(h.t, err)
}

// A loop that falls behind (a starved goroutine under load; here an
// Acquired held on purpose) must not stop the watch from being read.
// client-go's fake clientsets send each write to every watcher from the
// writer's own goroutine into a channel of 100 events, and panic with
// "channel full" once a watcher is that far behind: the writer, often the
// user's own test, crashed. A real API server closes such a watcher. Each
// write here (the 300 a busy namespace may bring while the loop is held)
// must return, and once the loop runs again it must be shown the last of
// them: a rival's write over the Lease it holds, which it must lose.
func TestAWatchIsReadWhileTheLoopIsBehind(t *testing.T) {
	h := newHeldLoop(t, 0)
	h.writeNoise(300)
	h.giveToB()
	h.release()
	select {
	case reason := <-h.lost:
		require.Equal(t, `taken by "b"`, reason)
	case <-time.After(wait):
		t.Fatal("the replica did not lose the Lease the last write gave to b")
	}
}

// A loop held for good must not make the watch keep every version since:
// past its backlog the watch is dropped, as an API server drops a watcher
// that does not keep up, and opened again after a list once the loop runs.
func TestAWatchTooFarBehindIsDroppedAndOpenedAgain(t *testing.T) {
	var watches atomic.Int32
	h := newHeldLoopWith(t, 50, func(c *fake.Clientset) { // before the first watch
		c.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
			watches.Add(1)
			return false, nil, nil // the fake's own watch
		})
	})
	require.EqualValues(t, 1, watches.Load())
	h.writeNoise(300)
	h.giveToB()
	h.release()
	// The dropped watch is opened again after the list a RetryPeriod later,
	// which shows the Lease b holds: lost, whether by that or by the
	// renewal the same step sends.
	var reason string
	for deadline := time.Now().Add(wait); reason == "" || watches.Load() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("lost %q, watches opened %d: the watch was not dropped and opened again", reason, watches.Load())
		}
		select {
		case reason = <-h.lost:
		case <-time.After(10 * time.Millisecond):
			h.clock.Step(retryPeriod / 4)
		}
	}
}
