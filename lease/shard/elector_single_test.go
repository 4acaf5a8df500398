package shard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

func newSingleGroup(t *testing.T) *group {
	g := newGroup(t, 1)
	g.single = true
	return g
}

func (g *group) singleLease() *coordinationv1.Lease {
	g.t.Helper()
	l, ok := g.server.Lease(testNamespace, testGroup)
	require.True(g.t, ok, "no Lease %s", testGroup)
	return l
}

// TestSingleLeaseRecord checks that the single lease is client-go's Lease:
// named exactly Config.Name, no labels, client-go's record, no member
// Lease; the transitions counted on each change of holder.
func TestSingleLeaseRecord(t *testing.T) {
	g := newSingleGroup(t)
	a := g.start("a")
	g.settle("a alone")
	l := g.singleLease()
	assert.Empty(t, l.Labels)
	assert.Equal(t, "a", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(leaseDuration/time.Second), *l.Spec.LeaseDurationSeconds)
	assert.NotNil(t, l.Spec.AcquireTime)
	assert.NotNil(t, l.Spec.RenewTime)
	assert.Equal(t, int32(0), *l.Spec.LeaseTransitions)
	for _, w := range g.server.History() {
		assert.Equal(t, testGroup, w.Name, "a Lease other than the single one was written")
	}

	g.start("b")
	g.settle("b standing by")
	assert.Equal(t, []string{"a"}, g.holders(), "a standby takes nothing from a live holder")
	g.stop("a")
	g.settle("hand-over")
	l = g.singleLease()
	assert.Equal(t, "b", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(1), *l.Spec.LeaseTransitions, "a → released → b: the release keeps the count, b's acquisition adds one (client-go's rule)")
	assert.Equal(t, []string{"a", ""}, a.seenHolders()[:2], "a saw itself, then its release")
	assert.Equal(t, []string{"a", "", "b"}, g.replicas["b"].seenHolders(), "HolderChanged on each change seen")
}

// TestSingleLeaseHandoverNeedsNoTick checks that a graceful hand-over of
// the single lease is the watch's: the standby takes the released Lease
// without the clock moving (client-go's elector would wait a retry period).
func TestSingleLeaseHandoverNeedsNoTick(t *testing.T) {
	g := newSingleGroup(t)
	g.start("a")
	g.settle("a")
	g.start("b")
	g.settle("b standing by")
	release := g.clock.Now()
	g.stop("a") // steps the clock only if a release fails
	g.settle("b takes over")
	assert.Equal(t, []string{"b"}, g.holders())
	assert.Equal(t, release, g.clock.Now(), "the hand-over waited for the clock")
	l := g.singleLease()
	history := g.server.History()
	var released bool
	for _, w := range history {
		released = released || (w.Client == "a" && w.Holder == "")
	}
	assert.True(t, released, "a released the Lease: %v", history)
	assert.Equal(t, "b", *l.Spec.HolderIdentity)
}

// TestSingleLeaseCrash checks that a crashed holder's Lease is taken once
// it has not changed for LeaseDuration on the standby's clock, and that a
// holder whose Lease is stolen is told why.
func TestSingleLeaseCrash(t *testing.T) {
	g := newSingleGroup(t)
	g.start("a")
	g.settle("a")
	b := g.start("b")
	g.settle("b standing by")
	g.crash("a")
	periods := g.settleStepping("crash", 4*int(leaseDuration/retryPeriod))
	assert.Equal(t, []string{"b"}, g.holders())
	assert.GreaterOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration-retryPeriod, "taken before it expired")
	assert.LessOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration+2*retryPeriod)

	require.NoError(t, g.server.Steal(testNamespace, testGroup, "thief", leaseDuration))
	select {
	case <-b.lost:
	case <-time.After(wait):
		t.Fatal("b was not told it lost the lease")
	}
	b.mu.Lock()
	assert.Equal(t, []string{`taken by "thief"`}, b.reasons)
	b.mu.Unlock()
}

// TestSingleLeaseThroughALock checks the polled mode (Config.Lock): a lock
// that cannot be watched is read every RetryPeriod and written through; a
// hand-over and a crash work as with the watch, one poll later. Real time,
// with client-go's pair of timings (mixed_test.go): a poll is a goroutine
// of its own, which a fake clock stepped by the test would outrun.
func TestSingleLeaseThroughALock(t *testing.T) {
	server := leasetest.NewServer()
	j := newJournal()
	type polled struct {
		client *leasetest.Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(id string) *polled {
		client := server.Client(id)
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, testNamespace, testGroup, nil, client.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: id})
		require.NoError(t, err)
		e, err := New(Config{Lock: lock, SingleLease: true, Namespace: testNamespace, Name: testGroup,
			LeaseDuration: mixedLeaseDuration, RenewDeadline: mixedRenewDeadline, RetryPeriod: mixedRetryPeriod,
			Callbacks: Callbacks{
				Acquired: func(i int) { j.start(id, i) },
				Release:  func(i int, done func()) { j.stop(id, i); done() },
				Lost:     func(i int, _ string, done func()) { j.stop(id, i); done() },
			}})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		p := &polled{client: client, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(p.done); e.Run(ctx) }()
		return p
	}
	holder := func(id string) func() bool {
		return func() bool { return server.Holder(testNamespace, testGroup) == id }
	}
	stop := func(p *polled) {
		p.cancel()
		waitFor(t, p.done, "Run returns")
	}

	a := start("a")
	require.Eventually(t, holder("a"), wait, poll, "a acquires")
	b := start("b")
	require.Never(t, holder("b"), 5*mixedRetryPeriod, poll, "b takes a renewed Lease")
	renewals := 0
	for _, w := range server.History() {
		if w.Client == "a" && w.Holder == "a" {
			renewals++
		}
	}
	assert.Greater(t, renewals, 3, "a renews through its lock")

	stop(a)
	// b takes it at its next poll, one retry period away. That it was
	// released, not left to expire, is read from the server's history
	// rather than from how long b took, which a loaded machine stretches.
	require.Eventually(t, holder("b"), wait, poll, "b takes the released Lease")
	var last leasetest.Write
	for _, w := range server.History() {
		if w.Client == "a" {
			last = w
		}
	}
	assert.Empty(t, last.Holder, "a's last write was not a release: %+v", last)
	l, _ := server.Lease(testNamespace, testGroup)
	assert.Equal(t, int32(1), *l.Spec.LeaseTransitions)

	c := start("c")
	b.client.Partition(true) // b crashes: its renewals stop
	require.Eventually(t, holder("c"), wait, poll, "c takes the expired Lease")
	b.client.Partition(false)
	stop(b)
	stop(c)
	j.check(t)
	for _, act := range a.client.Actions() {
		assert.Contains(t, []string{"get", "create", "update"}, act.GetVerb(), "a lock is polled, never watched")
	}
}
