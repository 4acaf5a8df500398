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
	client := fake.NewClientset()
	leases := client.CoordinationV1().Leases(testNamespace)
	acquired, resume, lost := make(chan struct{}), make(chan struct{}), make(chan string, 1)
	e, err := New(Config{Client: client, Namespace: testNamespace, Name: testGroup, Identity: "a", SingleLease: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)),
		Callbacks: Callbacks{
			Acquired: func(int) { close(acquired); <-resume },
			Release:  func(_ int, done func()) { done() },
			Lost:     func(_ int, reason string, done func()) { lost <- reason; done() },
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	resumed := false
	defer func() {
		if !resumed {
			close(resume)
		}
		cancel()
		<-done
	}()
	select {
	case <-acquired: // the loop is held in Acquired until resume closes
	case <-time.After(wait):
		t.Fatal("the replica did not acquire the Lease")
	}

	const writes = 300
	noise, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "noise", Namespace: testNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	write := func(n int) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("write %d of %d panicked in the fake clientset: %v", n, writes, p)
			}
		}()
		noise.Annotations = map[string]string{"n": strconv.Itoa(n)}
		noise, err = leases.Update(ctx, noise, metav1.UpdateOptions{})
		return err
	}
	for n := 1; n <= writes; n++ {
		require.NoError(t, write(n))
	}
	held, err := leases.Get(ctx, testGroup, metav1.GetOptions{})
	require.NoError(t, err)
	held.Spec.HolderIdentity = ptr.To("b")
	_, err = leases.Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(t, err)
	resumed = true
	close(resume)
	select {
	case reason := <-lost:
		require.Equal(t, `taken by "b"`, reason)
	case <-time.After(wait):
		t.Fatal("the replica did not lose the Lease the last write gave to b")
	}
}

// A loop held for good must not make the watch keep every version since:
// past its backlog the watch is dropped, as an API server drops a watcher
// that does not keep up, and opened again after a list once the loop runs.
func TestAWatchTooFarBehindIsDroppedAndOpenedAgain(t *testing.T) {
	client := fake.NewClientset()
	var watches atomic.Int32
	client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil // the fake's own watch
	})
	leases := client.CoordinationV1().Leases(testNamespace)
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	acquired, resume, lost := make(chan struct{}), make(chan struct{}), make(chan string, 1)
	var first sync.Once
	e, err := New(Config{Client: client, Namespace: testNamespace, Name: testGroup, Identity: "a", SingleLease: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: clk,
		Callbacks: Callbacks{
			Acquired: func(int) { first.Do(func() { close(acquired) }); <-resume }, // taken again once b's expires
			Release:  func(_ int, done func()) { done() },
			Lost: func(_ int, reason string, done func()) {
				select {
				case lost <- reason:
				default:
				}
				done()
			},
		}})
	require.NoError(t, err)
	e.backlog = 50
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	resumed := false
	defer func() {
		if !resumed {
			close(resume)
		}
		cancel()
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				clk.Step(retryPeriod) // a release that failed is retried each retry period
			}
		}
	}()
	select {
	case <-acquired:
	case <-time.After(wait):
		t.Fatal("the replica did not acquire the Lease")
	}
	require.EqualValues(t, 1, watches.Load())

	noise, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "noise", Namespace: testNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for n := 1; n <= 300; n++ {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("write %d panicked in the fake clientset: %v", n, p)
				}
			}()
			noise.Annotations = map[string]string{"n": strconv.Itoa(n)}
			noise, err = leases.Update(ctx, noise, metav1.UpdateOptions{})
			require.NoError(t, err)
		}()
	}
	held, err := leases.Get(ctx, testGroup, metav1.GetOptions{})
	require.NoError(t, err)
	held.Spec.HolderIdentity = ptr.To("b")
	_, err = leases.Update(ctx, held, metav1.UpdateOptions{})
	require.NoError(t, err)
	resumed = true
	close(resume)
	// The dropped watch is opened again after the list a RetryPeriod later,
	// which shows the Lease b holds: lost, whether by that or by the
	// renewal the same step sends.
	var reason string
	for deadline := time.Now().Add(wait); reason == "" || watches.Load() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("lost %q, watches opened %d: the watch was not dropped and opened again", reason, watches.Load())
		}
		select {
		case reason = <-lost:
		case <-time.After(10 * time.Millisecond):
			clk.Step(retryPeriod / 4)
		}
	}
}
