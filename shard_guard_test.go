package controllermanager_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// A shard's guard, outside a child, follows that shard's Lease alone: a
// shard stolen fails its guard and not the other's, and it passes again once
// the replica holds the shard again.
func TestShardLeaseGuard(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = 2
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")), cm.ControllerManagerConfigSpec{LeaderElection: spec}, "",
		cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	events := (&elEvents{}).subscribe(m)
	m.AddSharded("ctl", func(sh cm.Shard) cm.Controller {
		return testchild.NewController(fmt.Sprintf("ctl-%d", sh.Index), testchild.Behavior{})
	})
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	}
	t.Cleanup(stop)
	for i := range 2 {
		require.ErrorIs(t, m.ShardLeaseGuard(i), lease.ErrNotHeld, "shard %d before the election", i)
	}
	require.NoError(t, m.Start(t.Context(), 0))
	elEventually(t, "both shards held", func() bool { return m.ShardLeaseGuard(0) == nil && m.ShardLeaseGuard(1) == nil })

	for _, shard := range []int{2, -1} {
		err := m.ShardLeaseGuard(shard)
		require.ErrorIs(t, err, lease.ErrNotHeld, "no write gets past an index out of range")
		assert.Contains(t, err.Error(), fmt.Sprintf("ShardLeaseGuard(%d): no such shard, this manager has 2 (0 to 1)", shard))
	}

	// Shard 1 moves away: its guard fails, shard 0's does not.
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
	events.nth(t, cm.ShardLost, 1)
	err = m.ShardLeaseGuard(1)
	require.ErrorIs(t, err, lease.ErrNotHeld)
	assert.Contains(t, err.Error(), elNamespace+"/"+elLeaseName+"-1")
	require.NoError(t, m.ShardLeaseGuard(0), "another shard's loss does not fail this one's guard")
	require.NoError(t, m.LeaseGuard(), "the replica still holds a shard")

	// The thief's lease expires; the replica takes the shard back.
	elEventually(t, "shard 1 held again", func() bool { return m.ShardLeaseGuard(1) == nil })

	stop()
	for i := range 2 {
		require.ErrorIs(t, m.ShardLeaseGuard(i), lease.ErrNotHeld, "shard %d once the manager has stopped", i)
	}
}

// With one lease, shard 0 is that lease, election on or off; any other
// index is an error.
func TestShardLeaseGuardWithOneLease(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	on, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "",
		cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	off, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	for name, m := range map[string]*cm.ControllerManager{"election on": on, "election off": off} {
		t.Run(name, func(t *testing.T) {
			stop := func() {
				ctx, cancel := context.WithTimeout(context.Background(), elWait)
				defer cancel()
				m.ShutdownAndWait(ctx)
			}
			t.Cleanup(stop)
			m.Add(testchild.NewController("ctl", testchild.Behavior{}))
			require.NoError(t, m.Start(t.Context(), 0))
			require.NoError(t, m.ShardLeaseGuard(0))
			err := m.ShardLeaseGuard(1)
			require.ErrorIs(t, err, lease.ErrNotHeld)
			assert.Contains(t, err.Error(), "ShardLeaseGuard(1): no such shard, this manager has 1 (0 to 0)")

			stop()
			require.ErrorIs(t, m.ShardLeaseGuard(0), lease.ErrNotHeld, "the manager has stopped")
			assert.Equal(t, m.LeaseGuard() != nil, m.ShardLeaseGuard(0) != nil, "shard 0 is the lease")
		})
	}
}
