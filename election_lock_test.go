package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// WithLeaseLock keeps working with the watch-driven elector: a lock has no
// watch, so the elector polls it every retry period and writes through it;
// the manager's clientset is not used for the Lease at all. A hand-over goes
// through as with the clientset, one poll later at most.
func TestElectionHandoverThroughALeaseLock(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	lockClients := map[string]*leasetest.Client{}
	withLock := func(id string) cm.Option {
		lockClients[id] = srv.Client(id + "-lock")
		lock, err := lease.NewLeaseLock(lockClients[id], elNamespace, elLeaseName, id)
		require.NoError(t, err)
		return cm.WithLeaseLock(lock)
	}
	a := newElReplica(t, srv, "a", cm.LeaseLostExit, activity, withLock("a"))
	a.start()
	a.waitStarted(t)
	b := newElReplica(t, srv, "b", cm.LeaseLostExit, activity, withLock("b"))
	b.start()
	elEventually(t, "b sees a lead", func() bool { return b.status(t).LeaderIdentity == "a" })
	assert.False(t, b.status(t).Leader)

	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	a.m.ShutdownAndWait(ctx)
	shutdownReturned := time.Now()
	b.waitStarted(t)
	t.Logf("a's ShutdownAndWait returned → b running %s (a poll every %s)", b.startedAt.Sub(shutdownReturned), elRetryPeriod)
	assert.Equal(t, "b", srv.Holder(elNamespace, elLeaseName))
	var released bool
	for _, w := range srv.History() {
		released = released || (w.Client == "a-lock" && w.Holder == "")
	}
	assert.True(t, released, "a released the lease through its lock: %+v", srv.History())
	assert.True(t, b.status(t).Leader)
	activity.assertNoOverlap(t)

	for id, c := range map[string]*leasetest.Client{"a": a.client, "b": b.client} {
		for _, act := range c.Actions() {
			assert.NotEqual(t, "leases", act.GetResource().Resource, "%s's clientset was used for the Lease: %s", id, act.GetVerb())
		}
	}
	for id, c := range lockClients {
		for _, act := range c.Actions() {
			assert.Contains(t, []string{"get", "create", "update"}, act.GetVerb(), "%s's lock: a lock is polled, never watched", id)
		}
	}
}
