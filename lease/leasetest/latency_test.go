package leasetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Slow calls of one Client overlap: n updates of n Leases, each delayed by
// d, are all in flight at once, as against a real API server, rather than
// queued behind the fake clientset's lock (n·d). The bound is a ratio, wide
// enough for a loaded machine.
func TestLatencyCallsOverlap(t *testing.T) {
	s := NewServer()
	c := s.Client("a")
	const n, d = 10, 200 * time.Millisecond
	leases := c.CoordinationV1().Leases("ns")
	for i := range n {
		_, err := leases.Create(context.Background(), newLease(string(rune('a'+i)), "g", "a"), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	c.SetLatency(Latency{Verbs: map[string]time.Duration{"update": d}})
	began := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := leases.Get(context.Background(), string(rune('a'+i)), metav1.GetOptions{})
			if !assert.NoError(t, err) {
				return
			}
			_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	took := time.Since(began)
	assert.GreaterOrEqual(t, took, d, "an update answered before its delay")
	assert.Less(t, took, n*d/2, "the updates were queued one behind another")
}

// A call whose context ends before its delay fails with the context's
// error at once, and still reaches the server at the end of its delay: a
// write that timed out may have been written.
func TestLatencyTimedOutWriteIsWrittenLater(t *testing.T) {
	s := NewServer()
	c := s.Client("a")
	leases := c.CoordinationV1().Leases("ns")
	l, err := leases.Create(context.Background(), newLease("x", "g", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	c.SetLatency(Latency{Leases: map[string]time.Duration{"x": 300 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	b := "b"
	l.Spec.HolderIdentity = &b
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return s.Holder("ns", "x") == "b" }, wait, time.Millisecond, "the timed-out write never reached the server")
	// Another Lease, and the zero Latency, are not delayed.
	c.SetLatency(Latency{})
	_, err = leases.Get(ctx, "x", metav1.GetOptions{}) // ctx has ended: only a delayed call would notice
	require.NoError(t, err)
}
