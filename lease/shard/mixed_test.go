package shard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The mixed-version pair's timing: real time, since client-go's
// LeaderElector runs on it; short, so that a crash costs three seconds.
// client-go sees a change of the record only when its JSON changes, and
// its times are whole seconds there: a renewal every 200ms shows as a
// change once a second, so LeaseDuration − RenewDeadline must exceed a
// second and a margin, as between two replicas of client-go.
const (
	mixedLeaseDuration = 3 * time.Second
	mixedRenewDeadline = time.Second
	mixedRetryPeriod   = 200 * time.Millisecond
)

// mixedReplica is one replica of the pair: client-go's LeaderElector on a
// LeaseLock (the previous release's elector) or this package's Elector in
// single-lease mode. leading is closed at its acquire callback.
type mixedReplica struct {
	id       string
	clientGo bool // client-go's LeaderElector
	client   *leasetest.Client
	leading  chan struct{}
	stopped  chan struct{} // client-go: OnStoppedLeading; Elector: Lost
	cancel   context.CancelFunc
	done     chan struct{}
}

func startClientGo(t *testing.T, server *leasetest.Server, j *journal, id string) *mixedReplica {
	r := &mixedReplica{id: id, clientGo: true, client: server.Client(id), leading: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testGroup}, Client: r.client.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: id}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: mixedLeaseDuration, RenewDeadline: mixedRenewDeadline, RetryPeriod: mixedRetryPeriod,
		ReleaseOnCancel: true, Name: testGroup,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { j.start(id, 0); close(r.leading) },
			// Leading ends here after a loss: client-go stops leading once
			// it could not renew for RenewDeadline.
			OnStoppedLeading: func() { j.stop(id, 0); close(r.stopped) },
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); le.Run(ctx) }()
	return r
}

func startNew(t *testing.T, server *leasetest.Server, j *journal, id string) *mixedReplica {
	r := &mixedReplica{id: id, client: server.Client(id), leading: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
	e, err := New(Config{Client: r.client, SingleLease: true, Namespace: testNamespace, Name: testGroup, Identity: id,
		LeaseDuration: mixedLeaseDuration, RenewDeadline: mixedRenewDeadline, RetryPeriod: mixedRetryPeriod,
		Callbacks: Callbacks{
			Acquired: func(int) { j.start(id, 0); close(r.leading) },
			// Leading ends once the children have stopped: here at once.
			Release: func(_ int, done func()) { j.stop(id, 0); done() },
			Lost:    func(_ int, _ string, done func()) { j.stop(id, 0); close(r.stopped); done() },
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); e.Run(ctx) }()
	return r
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: timed out", what)
	}
}

// TestMixedVersionPair runs, on one Lease, a replica of the previous
// release (client-go's LeaderElector with a LeaseLock) and one of this
// package's Elector, as during a rolling upgrade, and hands the lease over
// in both directions, gracefully and by a crash (the holder cut off, its
// renewals failing): their leading intervals, from the acquire callback to
// the end of fencing, never overlap.
func TestMixedVersionPair(t *testing.T) {
	type starter func(*testing.T, *leasetest.Server, *journal, string) *mixedReplica
	for _, tc := range []struct {
		name            string
		leader, standby starter
		crash           bool
	}{
		{"client-go releases to the Elector", startClientGo, startNew, false},
		{"the Elector releases to client-go", startNew, startClientGo, false},
		{"client-go crashes, the Elector takes over", startClientGo, startNew, true},
		{"the Elector crashes, client-go takes over", startNew, startClientGo, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, j := leasetest.NewServer(), newJournal()
			leader := tc.leader(t, server, j, "old")
			waitFor(t, leader.leading, "the first replica leads")
			standby := tc.standby(t, server, j, "new")
			defer func() { standby.cancel(); waitFor(t, standby.done, "the standby ends") }()

			// The standby sees a live holder and waits for several
			// retry periods, however many times it reads the Lease.
			select {
			case <-standby.leading:
				t.Fatal("the standby took a live Lease")
			case <-time.After(3 * mixedRetryPeriod):
			}
			began := time.Now()
			if tc.crash {
				leader.client.Partition(true)
				waitFor(t, leader.stopped, "the cut-off holder stops leading")
			} else if leader.clientGo {
				// The previous release stops its controllers, then cancels
				// the elector, which releases (ReleaseOnCancel); the
				// Elector's Release callback does the same in order.
				j.stop(leader.id, 0)
			}
			leader.cancel()
			waitFor(t, standby.leading, "the standby takes over")
			took := time.Since(began)
			waitFor(t, leader.done, "the first replica ends")
			t.Logf("taken over in %s", took.Round(time.Millisecond))
			if tc.crash {
				require.GreaterOrEqual(t, took, mixedRenewDeadline, "taken before the holder could have given it up")
			} else {
				require.Less(t, took, mixedLeaseDuration, "a release was not taken as one")
			}
			j.check(t)
		})
	}
}
