package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// Sharded leadership against awkward controllers, through the public API:
// a Shutdown that hangs while its shard moves, or after its shard is lost;
// a stolen shard with Exit. Two shards, ctl-0 and ctl-1 (AddSharded).

// hostileShardReplica starts a manager of two shards whose controllers are
// returned by name.
func hostileShardReplica(t *testing.T, srv *leasetest.Server, id string, onLost cm.LeaseLostAction, activity *elActivity) (*cm.ControllerManager, map[string]*elController, *elEvents) {
	m, ctrls, events, _ := hostileShardReplicaClient(t, srv, id, onLost, activity)
	return m, ctrls, events
}

func hostileShardReplicaClient(t *testing.T, srv *leasetest.Server, id string, onLost cm.LeaseLostAction, activity *elActivity) (*cm.ControllerManager, map[string]*elController, *elEvents, *leasetest.Client) {
	t.Helper()
	spec := elSpec(onLost)
	spec.Shards = 2
	client := srv.Client(id)
	m, err := cm.NewControllerManager(cm.NewContext(client), cm.ControllerManagerConfigSpec{LeaderElection: spec}, "",
		cm.WithIdentity(id), elQuiet)
	require.NoError(t, err)
	events := (&elEvents{}).subscribe(m)
	ctrls := map[string]*elController{}
	var mu sync.Mutex
	m.AddSharded("ctl", func(s cm.Shard) cm.Controller {
		c := &elController{replica: id, name: fmt.Sprintf("ctl-%d", s.Index), activity: activity}
		mu.Lock()
		ctrls[c.name] = c
		mu.Unlock()
		return c
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	go func() { _ = m.Start(context.Background(), 0) }()
	return m, ctrls, events, client
}

func holdsShard(t *testing.T, m *cm.ControllerManager, i int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	st, err := m.Status(ctx)
	require.NoError(t, err)
	return len(st.Shards) > i && st.Shards[i].Held
}

// A shard that moves to a joining replica is handed over only once its
// controller's Shutdown has returned, however long that takes: the Lease is
// renewed meanwhile, and the joiner does not run the controller.
func TestShardMovesOnlyAfterAHungShutdownReturns(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a, actrls, _ := hostileShardReplica(t, srv, "a", cm.LeaseLostReelect, activity)
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, a, 0) && holdsShard(t, a, 1) })
	elEventually(t, "a runs both controllers", func() bool {
		r0, _ := actrls["ctl-0"].counts()
		r1, _ := actrls["ctl-1"].counts()
		return r0 == 1 && r1 == 1
	})
	release := make(chan struct{})
	for _, c := range actrls {
		c.set(nil, func(context.Context) { <-release }) // ignores its context too
	}
	b, bctrls, _ := hostileShardReplica(t, srv, "b", cm.LeaseLostReelect, activity)
	// b is assigned one shard; a's controller of it hangs in Shutdown.
	// For longer than a lease duration, the shard stays with a.
	elConsistently(t, elLeaseDuration+elRenewDeadline, "no controller runs on b while a's Shutdown hangs", func() bool {
		for _, c := range bctrls {
			if runs, _ := c.counts(); runs > 0 {
				return false
			}
		}
		return true
	})
	close(release)
	elEventually(t, "b runs one controller once a's Shutdown returned", func() bool {
		n := 0
		for _, c := range bctrls {
			if runs, _ := c.counts(); runs > 0 {
				n++
			}
		}
		return n == 1 && (holdsShard(t, b, 0) != holdsShard(t, b, 1))
	})
	activity.assertNoOverlapPerChild(t)
}

// A replica cut off from the API server with a controller whose Shutdown
// hangs fails, within the fence timeout, with an error naming the child
// and wrapping lease.ErrLost, so that its host exits before another
// replica runs that controller.
func TestLostShardWithAHungShutdownFailsTheManager(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a, actrls, aevents, aclient := hostileShardReplicaClient(t, srv, "a", cm.LeaseLostReelect, activity)
	elEventually(t, "a runs both controllers", func() bool {
		r0, _ := actrls["ctl-0"].counts()
		r1, _ := actrls["ctl-1"].counts()
		return r0 == 1 && r1 == 1
	})
	defer func() {
		if t.Failed() {
			for _, e := range aevents.all() {
				t.Logf("%s %s", e.Time.Format("05.000"), e)
			}
		}
	}()
	hang := make(chan struct{})
	defer close(hang)
	actrls["ctl-1"].set(nil, func(context.Context) { <-hang })
	aclient.Partition(true)
	select {
	case <-a.Done():
	case <-time.After(elWait):
		t.Fatal("a did not stop after its shard was lost with a Shutdown that hangs")
	}
	err := a.Err()
	require.ErrorIs(t, err, lease.ErrLost)
	assert.Contains(t, err.Error(), `not fenced: controller "ctl-1" did not return from Shutdown`)
}

// With Exit, a stolen shard Lease stops the whole manager: Err wraps
// lease.ErrLost and names the shard; the other shard is handed over.
func TestStolenShardWithExitStopsTheManager(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a, _, events := hostileShardReplica(t, srv, "a", cm.LeaseLostExit, activity)
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, a, 0) && holdsShard(t, a, 1) })
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
	select {
	case <-a.Done():
	case <-time.After(elWait):
		t.Fatal("a did not stop after a shard was stolen, with Exit")
	}
	err := a.Err()
	require.ErrorIs(t, err, lease.ErrLost)
	assert.Contains(t, err.Error(), "shard 1 (Lease "+elLeaseName+"-1)")
	// Done does not wait for subscribers; ShutdownAndWait, on a stopped
	// manager, waits until they have every event.
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	a.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err(), "the subscriber did not get the last events")
	assert.Equal(t, 1, events.count(cm.ShardLost))
	assert.Equal(t, 1, events.count(cm.ShardReleased), "the other shard is handed over")
	assert.Empty(t, srv.Holder(elNamespace, elLeaseName+"-0"), "shard 0's Lease is released")
	var lost *cm.Event
	for _, e := range events.all() {
		if e.Type == cm.ShardLost {
			lost = &e
		}
	}
	require.NotNil(t, lost)
	assert.Equal(t, 1, lost.Shard)
	assert.True(t, errors.Is(lost.Err, lease.ErrLost))
}

// assertNoOverlapPerChild fails if one child was active on two replicas at
// once (sharded: different children may run on different replicas).
func (a *elActivity) assertNoOverlapPerChild(t *testing.T) {
	t.Helper()
	a.overlaps(func(x, y elSpan) bool { return x.child == y.child }, func(x, y elSpan, _, _ time.Time) {
		t.Errorf("%s ran on %s and %s at once", x.child, x.replica, y.replica)
	})
}
