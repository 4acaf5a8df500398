package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// On client-go's fake clientset, which keeps no resourceVersion and takes
// every update, the read before a write is all that keeps two holders
// apart, and it leaves the moment between the read and the write open. A
// replica stalled in that moment (a starved goroutine, a GC pause) writes
// over a rival that has taken the Lease meanwhile. These tests hold one
// replica's write at that moment, on a fake clock, let the other take the
// Lease, then let the write land: the stalled replica must not count it
// (confirm, errRenewedLate), and must not campaign on it until it has
// expired (suspect), or both would run the shard.

// gatedStore holds every Update while hold is set, after the read that
// update (the elector's) makes before it: entered is signalled, and the
// writes go on once open is closed.
type gatedStore struct {
	leaseStore
	hold    atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func newGatedStore(s leaseStore) *gatedStore {
	return &gatedStore{leaseStore: s, entered: make(chan struct{}, 1), open: make(chan struct{})}
}

func (s *gatedStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if s.hold.Load() {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		<-s.open
	}
	return s.leaseStore.Update(ctx, l)
}

// unversioned is replicas of one lease on one fake clientset and one fake
// clock, and the journal of who ran the shard.
type unversioned struct {
	t       *testing.T
	client  kubernetes.Interface
	clock   *clocktesting.FakeClock
	journal *journal
	mu      sync.Mutex
	gained  map[string][]time.Time // each replica's acquisitions, on the fake clock
	lost    map[string]int
}

func newUnversioned(t *testing.T) *unversioned {
	return &unversioned{t: t, client: fake.NewClientset(), clock: clocktesting.NewFakeClock(time.Now()), journal: newJournal(),
		gained: map[string][]time.Time{}, lost: map[string]int{}}
}

// start runs a replica id whose store is gated: holding its first write
// when holdFirst.
func (u *unversioned) start(id string, holdFirst bool) *gatedStore {
	e, err := New(Config{Client: u.client, Namespace: testNamespace, Name: testGroup, Identity: id, SingleLease: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: u.clock,
		Callbacks: Callbacks{
			Acquired: func(i int) {
				u.journal.start(id, i)
				u.mu.Lock()
				u.gained[id] = append(u.gained[id], u.clock.Now())
				u.mu.Unlock()
			},
			Release: func(i int, done func()) { u.journal.stop(id, i); done() },
			Lost: func(i int, _ string, done func()) {
				u.journal.stop(id, i)
				u.mu.Lock()
				u.lost[id]++
				u.mu.Unlock()
				done()
			},
		}})
	require.NoError(u.t, err)
	gate := newGatedStore(e.store)
	gate.hold.Store(holdFirst)
	e.store = gate
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	<-e.ticking
	u.t.Cleanup(func() {
		select {
		case <-gate.open:
		default:
			close(gate.open)
		}
		cancel()
		for {
			select {
			case <-done:
				return
			case <-time.After(poll):
				u.clock.Step(retryPeriod) // a campaign's read-back waits on the clock
			}
		}
	})
	return gate
}

func (u *unversioned) gains(id string) []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.gained[id]...)
}

func (u *unversioned) losses(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lost[id]
}

// stepUntil moves the fake clock a fifth of a retry period at a time,
// letting the replicas react between steps, until cond holds.
func (u *unversioned) stepUntil(what string, cond func() bool) {
	u.t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			u.t.Fatalf("timed out waiting until %s", what)
		}
		<-time.After(poll)
		u.clock.Step(retryPeriod / 5)
	}
}

func (u *unversioned) entered(g *gatedStore, what string) {
	u.t.Helper()
	select {
	case <-g.entered:
	case <-time.After(wait):
		u.t.Fatalf("timed out waiting until %s", what)
	}
}

// Two replicas read the same free Lease; a's write is held while b writes,
// reads its write back and takes the Lease, then lands over b's. a must
// not count it: its read and write took longer than confirmAfter. b finds
// a's record at its next renewal and loses the shard; a's write is left to
// expire before anybody takes the Lease again.
func TestUnversionedCampaignRaceHasOneHolder(t *testing.T) {
	u := newUnversioned(t)
	_, err := u.client.CoordinationV1().Leases(testNamespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: testGroup, Namespace: testNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To(int32(1))},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	ga := u.start("a", true)
	u.entered(ga, "a has read the free Lease and writes")
	u.start("b", false)
	u.stepUntil("b holds the Lease", func() bool { return len(u.gains("b")) == 1 })
	landed := u.clock.Now()
	ga.hold.Store(false)
	close(ga.open)

	u.stepUntil("b loses the Lease a wrote over", func() bool { return u.losses("b") == 1 })
	u.stepUntil("the Lease is held again", func() bool { return len(u.gains("a"))+len(u.gains("b")) == 2 })
	u.journal.check(t)
	for _, at := range u.gains("a") {
		require.False(t, at.Before(landed.Add(leaseDuration)),
			"a took the Lease %s after its unconfirmed write landed, before that write expired", at.Sub(landed))
	}
}

// a holds the Lease; its renewal is held after its read while the Lease
// expires, a is cut off by its deadline and b takes the Lease over; then
// a's renewal lands over b's. a must treat that write as anybody's: not
// campaign on it until it has expired, while b, which finds it at its
// next renewal, stops.
func TestUnversionedLateRenewalIsNotCampaignedOn(t *testing.T) {
	u := newUnversioned(t)
	ga := u.start("a", false)
	u.stepUntil("a holds the Lease", func() bool { return len(u.gains("a")) == 1 })
	u.start("b", false)
	ga.hold.Store(true)
	u.stepUntil("a's renewal has read the Lease and writes", func() bool {
		select {
		case <-ga.entered:
			return true
		default:
			return false
		}
	})
	u.stepUntil("a is cut off by its deadline and b takes over", func() bool {
		return u.losses("a") == 1 && len(u.gains("b")) == 1
	})
	landed := u.clock.Now()
	ga.hold.Store(false)
	close(ga.open)

	u.stepUntil("b loses the Lease a wrote over", func() bool { return u.losses("b") == 1 })
	u.stepUntil("the Lease is held again", func() bool { return len(u.gains("a"))+len(u.gains("b")) == 3 })
	u.journal.check(t)
	for _, at := range u.gains("a")[1:] {
		require.False(t, at.Before(landed.Add(leaseDuration)),
			"a took the Lease %s after its late renewal landed, before that renewal expired", at.Sub(landed))
	}
}
