package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The guard's bound at the harness's timing: a 2s lease less the default
// margin, fence budget 900ms − fence timeout 720ms = 180ms.
const (
	defaultMargin = 180 * time.Millisecond
	guardValid    = leaseDuration - defaultMargin
)

// fencedReplica is an elected replica whose fence reads a fake clock, over a
// lock that can be stalled. client-go renews on the real clock; every send
// time it records is the fake clock's reading, which only the test moves.
func fencedReplica(t *testing.T) (*replica, *lease.Fence, *clocktesting.FakeClock, *stallingLock, *leasetest.Server) {
	t.Helper()
	srv := leasetest.NewServer()
	lock := &stallingLock{Interface: newLock(t, srv.Client("a"), "a")}
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	fence := lease.NewFence()
	cfg := config(lock)
	cfg.Fence, cfg.Clock = fence, clk
	require.ErrorIs(t, fence.Check(), lease.ErrNotHeld, "before any election")
	r := startReplica(t, cfg)
	next[lease.Elected](r)
	return r, fence, clk, lock, srv
}

// noReport fails if the elector has reported anything but NewLeader so far.
func noReport(t *testing.T, r *replica) {
	t.Helper()
	for {
		select {
		case rep := <-r.reports:
			if _, ok := rep.msg.(lease.NewLeader); !ok {
				t.Fatalf("the elector reported %T before the guard failed", rep.msg)
			}
		default:
			return
		}
	}
}

func TestFenceFailsAPausePastTheBoundBeforeTheElectorKnows(t *testing.T) {
	t.Parallel()
	r, fence, clk, lock, _ := fencedReplica(t)
	require.NoError(t, fence.Check(), "elected")
	guard := fence.Guard()

	// A pause: renewals stop (stalled, as a frozen process's would), and
	// the clock jumps. Every renewal sent so far was sent at the fake
	// clock's current reading.
	unstall := lock.stall()
	defer unstall()
	clk.Step(guardValid - time.Nanosecond)
	require.NoError(t, guard(), "within the bound")
	clk.Step(time.Nanosecond)
	err := guard()
	require.ErrorIs(t, err, lease.ErrNotHeld, "past the bound")
	assert.NotErrorIs(t, err, lease.ErrLost, "nobody has said lost yet")
	require.ErrorIs(t, fence.Check(), lease.ErrNotHeld)
	noReport(t, r) // the elector has not noticed anything

	var nh *lease.NotHeldError
	require.ErrorAs(t, err, &nh)
	assert.Equal(t, guardValid, nh.Now.Sub(nh.LastRenewalSent), "the figures: sent a bound ago")
	assert.Equal(t, leaseDuration, nh.LeaseDuration)
	assert.Equal(t, defaultMargin, nh.Margin)
	assert.Contains(t, err.Error(), "last successful renewal sent 1.82s ago, valid for 1.82s (lease 2s less margin 180ms)")

	// Renewals resume: the next one, sent at the new reading, moves the
	// bound, before the elector's own stall check would have fired.
	unstall()
	eventually(t, func() bool { return guard() == nil }, "a renewal moves the bound")
	clk.Step(2 * guardValid)
	eventually(t, func() bool { return guard() == nil }, "renewals keep moving it")
	noReport(t, r)
}

func TestFenceGuardIsBoundToItsElection(t *testing.T) {
	t.Parallel()
	r, fence, _, _, _ := fencedReplica(t)
	guard := fence.Guard()
	require.NoError(t, guard())

	// The election ends: its guard fails from then on.
	r.send(stopElector{}) // an elector stopped ends its election
	eventually(t, func() bool { return guard() != nil }, "the guard fails once the election is over")
	require.ErrorIs(t, fence.Check(), lease.ErrNotHeld)

	// A new election, the lease still ours: the fence holds again; the old
	// election's guard never does.
	r.send(spawnElector{})
	next[lease.Elected](r)
	require.NoError(t, fence.Check())
	err := guard()
	require.ErrorIs(t, err, lease.ErrNotHeld)
	assert.Contains(t, err.Error(), "elector stopped")
	require.NoError(t, fence.Guard()())

	// Resign: fails at once, with the reason.
	r.send(lease.Resign{})
	next[lease.Released](r)
	err = fence.Check()
	require.ErrorIs(t, err, lease.ErrNotHeld)
	assert.Contains(t, err.Error(), "resigned")
}

func TestFenceFailsOnLostAndTakeover(t *testing.T) {
	t.Parallel()
	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		srv := leasetest.NewServer()
		client := srv.Client("a")
		fence := lease.NewFence()
		cfg := config(newLock(t, client, "a"))
		cfg.Fence, cfg.Clock = fence, clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
		r := startReplica(t, cfg)
		next[lease.Elected](r)
		guard := fence.Guard()
		client.Partition(true)
		next[lease.Lost](r)
		err := guard()
		require.ErrorIs(t, err, lease.ErrNotHeld)
		require.ErrorIs(t, err, lease.ErrLost)
		assert.Contains(t, err.Error(), "lost")
	})
	t.Run("taken over", func(t *testing.T) {
		t.Parallel()
		r, fence, _, _, srv := fencedReplica(t)
		guard := fence.Guard()
		require.NoError(t, srv.Steal(namespace, leaseName, "thief", time.Minute))
		// The next renewal conflicts; client-go reads the Lease, which
		// names the thief: the guard fails then, well before the renew
		// deadline makes the elector report Lost.
		eventually(t, func() bool { return guard() != nil }, "the guard fails once the Lease names another holder")
		noReport(t, r)
		assert.Contains(t, guard().Error(), "names another holder")
		next[lease.Lost](r)
	})
}

func TestFenceValidatesTheMargin(t *testing.T) {
	lock := newLock(t, leasetest.NewServer().Client("a"), "a")
	for _, tt := range []struct {
		margin time.Duration
		want   string
	}{
		{defaultMargin - time.Millisecond, "clockSkewMargin 179ms is less than the margin the fence timeout leaves (180ms"},
		{-time.Second, "clockSkewMargin -1s is less than"},
		{leaseDuration - renewDeadline, "clockSkewMargin 1s must be less than the recorded leaseDuration 2s − renewDeadline 1s"},
	} {
		cfg := config(lock)
		cfg.ClockSkewMargin = tt.margin
		_, err := lease.NewProps(cfg)
		require.Error(t, err, tt.margin)
		assert.Contains(t, err.Error(), tt.want)
	}
	cfg := config(lock)
	cfg.ClockSkewMargin = 500 * time.Millisecond
	_, err := lease.NewProps(cfg)
	require.NoError(t, err)
}

func TestFenceNilAndZeroHoldNothing(t *testing.T) {
	var nilFence *lease.Fence
	require.ErrorIs(t, nilFence.Check(), lease.ErrNotHeld)
	require.ErrorIs(t, nilFence.Guard()(), lease.ErrNotHeld)
	require.ErrorIs(t, (&lease.Fence{}).Guard()(), lease.ErrNotHeld)
	assert.False(t, errors.Is(nilFence.Check(), lease.ErrLost))
}

func TestFenceCheckDoesNotAllocate(t *testing.T) {
	_, fence, _, _, _ := fencedReplica(t)
	guard := fence.Guard()
	allocs := testing.AllocsPerRun(1000, func() {
		if guard() != nil || fence.Check() != nil {
			panic("not held")
		}
	})
	assert.Zero(t, allocs)
}

// BenchmarkFenceCheck is the guard's hot path on the real clock, the lease
// held and renewed meanwhile.
func BenchmarkFenceCheck(b *testing.B) {
	fence := lease.NewFence()
	cfg := config(newLock(b, leasetest.NewServer().Client("a"), "a"))
	cfg.Fence = fence
	r := startReplica(b, cfg)
	next[lease.Elected](r)
	guard := fence.Guard()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := guard(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
