package lease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

func TestNewPropsValidates(t *testing.T) {
	lock := newLock(t, leasetest.NewServer().Client("a"), "a")
	tests := []struct {
		name string
		mod  func(*lease.Config)
		want string
	}{
		{"no lock", func(c *lease.Config) { c.Lock = nil }, "no lock"},
		{"lease not longer than renew", func(c *lease.Config) { c.LeaseDuration = c.RenewDeadline }, "leaseDuration must be greater than renewDeadline"},
		{"renew not longer than 1.2 retry", func(c *lease.Config) { c.RetryPeriod = c.RenewDeadline }, "renewDeadline must be greater than retryPeriod"},
		{"no time to fence", func(c *lease.Config) {
			c.RetryPeriod = 800 * time.Millisecond
			c.LeaseDuration = 1800 * time.Millisecond
		},
			"leaves no time to fence"},
		{"empty identity", func(c *lease.Config) { c.Lock = newLock(t, leasetest.NewServer().Client("b"), "") }, "identity is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config(lock)
			tt.mod(&cfg)
			props, err := lease.NewProps(cfg)
			require.Error(t, err)
			assert.Nil(t, props)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	t.Run("fence budget", func(t *testing.T) {
		cfg := config(lock)
		assert.Equal(t, 900*time.Millisecond, cfg.FenceBudget())
		assert.Equal(t, 720*time.Millisecond, cfg.FenceTimeout())
	})
}

func TestResignReleasesTheLeaseAndAStandbyTakesOver(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	a := startReplica(t, config(newLock(t, srv.Client("a"), "a")))
	elected, _ := next[lease.Elected](a)
	assert.Equal(t, "a", elected.Identity)
	b := startReplica(t, config(newLock(t, srv.Client("b"), "b")))
	eventually(t, func() bool {
		select {
		case rep := <-b.reports:
			return rep.msg == lease.NewLeader{Identity: "a"}
		default:
			return false
		}
	}, "b sees a lead")
	none[lease.Elected](b, 3*retryPeriod)

	a.send(lease.Resign{})
	_, releasedAt := next[lease.Released](a)
	_, electedAt := next[lease.Elected](b)
	assert.Equal(t, "b", srv.Holder(namespace, leaseName))
	handover := electedAt.Sub(releasedAt)
	t.Logf("handover: a released → b elected in %s", handover)
	// client-go retries every retry period with up to 120% jitter; an
	// expired lease would take a lease duration.
	assert.Less(t, handover, leaseDuration/2, "a standby takes a released lease over at its next retry")

	var released bool
	for _, w := range srv.History() {
		if w.Client == "a" && w.Holder == "" {
			released = true
		}
	}
	assert.True(t, released, "a wrote the release record: %+v", srv.History())
}

func TestResignBeforeElectedReleasesNothing(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	a := startReplica(t, config(newLock(t, srv.Client("a"), "a")))
	next[lease.Elected](a)
	b := startReplica(t, config(newLock(t, srv.Client("b"), "b")))
	next[lease.NewLeader](b)
	b.send(lease.Resign{})
	next[lease.Released](b)
	assert.Equal(t, "a", srv.Holder(namespace, leaseName), "a standby's Resign leaves the leader alone")
	for _, w := range srv.History() {
		assert.NotEqual(t, "b", w.Client, "b never wrote")
	}
}

// A lease taken over behind the leader's back: its next renewal carries a
// stale resourceVersion and is refused, and it reports Lost well before the
// new holder's lease would let a third replica in, without overwriting it.
func TestStolenLeaseIsLost(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	a := startReplica(t, config(newLock(t, srv.Client("a"), "a")))
	next[lease.Elected](a)
	stolenAt := time.Now()
	require.NoError(t, srv.Steal(namespace, leaseName, "thief", leaseDuration))
	_, lostAt := next[lease.Lost](a)
	took := lostAt.Sub(stolenAt)
	t.Logf("stolen → Lost in %s", took)
	assert.Less(t, took, renewDeadline+retryPeriod+500*time.Millisecond)
	assert.Equal(t, "thief", srv.Holder(namespace, leaseName), "the leader never overwrote the new holder")
	none[lease.Lost](a, 2*retryPeriod)
}

// A leader cut off from the API server reports Lost, and does not release
// the lease: it expires on its own, after Lost plus the fence budget.
func TestPartitionedLeaderIsLostAndItsLeaseExpires(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	clientA := srv.Client("a")
	cfgA := config(newLock(t, clientA, "a"))
	a := startReplica(t, cfgA)
	next[lease.Elected](a)
	b := startReplica(t, config(newLock(t, srv.Client("b"), "b")))
	next[lease.NewLeader](b)

	clientA.Partition(true)
	_, lostAt := next[lease.Lost](a)
	_, electedAt := next[lease.Elected](b)
	var lastRenewal time.Time
	for _, w := range srv.History() {
		if w.Client == "a" {
			lastRenewal = w.Time
			assert.Equal(t, "a", w.Holder, "a never released a lease it could not renew")
		}
	}
	t.Logf("a's last renewal → Lost %s; Lost → b elected %s (fence budget %s)",
		lostAt.Sub(lastRenewal), electedAt.Sub(lostAt), cfgA.FenceBudget())
	assert.GreaterOrEqual(t, electedAt.Sub(lastRenewal), leaseDuration, "b waited for the lease to expire")
	assert.GreaterOrEqual(t, electedAt.Sub(lostAt), cfgA.FenceTimeout(), "the fence budget held")
	clientA.Partition(false)
}

// A renewal that hangs, ignoring its context, stalls client-go's renew loop:
// the elector reports Lost by itself, the watchdog fails once the lease is
// older than its duration plus the grace, and a new elector of the same
// Props does not touch the lock until the stalled election has ended.
func TestStalledRenewalIsLostWatchedAndFenced(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	lock := &stallingLock{Interface: newLock(t, srv.Client("a"), "a")}
	watchdog := lease.NewWatchdog(100 * time.Millisecond)
	cfg := config(lock)
	cfg.Watchdog = watchdog
	a := startReplica(t, cfg)
	next[lease.Elected](a)
	require.NoError(t, watchdog.Check(nil))

	unstall := lock.stall()
	defer unstall()
	stalledAt := time.Now()
	lost, lostAt := next[lease.Lost](a)
	t.Logf("stalled → Lost in %s", lostAt.Sub(stalledAt))
	assert.Equal(t, fmt.Sprintf("not renewed for more than %s (renew deadline %s + 1.5 × retry period %s)",
		renewDeadline+retryPeriod*3/2, renewDeadline, retryPeriod), lost.Reason)
	assert.Less(t, lostAt.Sub(stalledAt), renewDeadline+2*retryPeriod+500*time.Millisecond)

	eventually(t, func() bool { return watchdog.Check(nil) != nil }, "the watchdog fails")
	err := watchdog.Check(nil)
	assert.ErrorIs(t, err, lease.ErrRenewalOverdue)
	assert.GreaterOrEqual(t, time.Since(stalledAt), leaseDuration, "not before the lease has expired")

	a.send(stopElector{})
	a.send(spawnElector{})
	none[lease.Elected](a, 3*retryPeriod)
	assert.Equal(t, 1, lock.maxConcurrent(), "the new elector waits for the stalled one")
	unstall()
	next[lease.Elected](a)
	assert.Equal(t, 1, lock.maxConcurrent())
	require.NoError(t, watchdog.Check(nil))
}

func TestWatchdog(t *testing.T) {
	var nilWatchdog *lease.Watchdog
	assert.NoError(t, nilWatchdog.Check(nil), "a nil watchdog always passes")
	assert.Equal(t, "leaderElection", nilWatchdog.Name())
	assert.NoError(t, lease.NewWatchdog(0).Check(nil), "nothing watched yet")
	assert.False(t, errors.Is(lease.NewWatchdog(0).Check(nil), lease.ErrRenewalOverdue))
}
