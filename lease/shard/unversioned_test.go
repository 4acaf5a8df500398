package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// gatedStore holds every Update while hold is set (only those holdIf
// takes, when set), after the read that update (the elector's) makes
// before it: entered is signalled, and the writes go on once open is
// closed. A held write that lands is answered answer, when set: a 500 or
// a timeout that hides a write the store took.
type gatedStore struct {
	leaseStore
	hold    atomic.Bool
	holdIf  func(*coordinationv1.Lease) bool
	answer  error
	entered chan struct{}
	open    chan struct{}
	stop    func() // ends the replica's Run (unversioned.start)
}

func newGatedStore(s leaseStore) *gatedStore {
	return &gatedStore{leaseStore: s, entered: make(chan struct{}, 1), open: make(chan struct{})}
}

func (s *gatedStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if !s.hold.Load() || (s.holdIf != nil && !s.holdIf(l)) {
		return s.leaseStore.Update(ctx, l)
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.open
	got, err := s.leaseStore.Update(ctx, l)
	if err == nil && s.answer != nil {
		return nil, s.answer
	}
	return got, err
}

// hiddenAnswers are what a write that landed may be answered: its success,
// or an error that says nothing of it.
var hiddenAnswers = map[string]error{
	"answered": nil,
	"500":      apierrors.NewInternalError(errors.New("etcd leader changed")),
	"timeout":  fmt.Errorf("update: %w", context.DeadlineExceeded),
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
	return u.startAnswering(id, holdFirst, nil)
}

// startAnswering is start, a held write that lands answered answer.
func (u *unversioned) startAnswering(id string, holdFirst bool, answer error) *gatedStore {
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
	gate.answer = answer
	gate.hold.Store(holdFirst)
	e.store = gate
	ctx, cancel := context.WithCancel(context.Background())
	gate.stop = cancel
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
//
// The same when a's write lands and is answered with an error that says
// nothing of it (a 500, a timeout): it may have landed, so a counts it as
// unconfirmed. It used to take it for a refusal, see the Lease naming
// itself as free and campaign again at once, over b (found by a review).
func TestUnversionedCampaignRaceHasOneHolder(t *testing.T) {
	for name, answer := range hiddenAnswers {
		t.Run(name, func(t *testing.T) { campaignRace(t, answer) })
	}
}

func campaignRace(t *testing.T, answer error) {
	u := newUnversioned(t)
	_, err := u.client.CoordinationV1().Leases(testNamespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: testGroup, Namespace: testNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To(int32(1))},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	ga := u.startAnswering("a", true, answer)
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
//
// The same when a's renewal lands and is answered with an error that says
// nothing of it (a 500, a timeout): it was dropped, a's hold being gone
// already, and a campaigned on the Lease naming it at once (found by a
// review).
func TestUnversionedLateRenewalIsNotCampaignedOn(t *testing.T) {
	for name, answer := range hiddenAnswers {
		t.Run(name, func(t *testing.T) { lateRenewalNotCampaignedOn(t, answer) })
	}
}

func lateRenewalNotCampaignedOn(t *testing.T, answer error) {
	u := newUnversioned(t)
	ga := u.startAnswering("a", false, answer)
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

// lateRenewal is a replica a alone on a fake clientset and a fake clock,
// its renewal held after its read until the deadline watcher has given the
// lease up, and the Lost's done not called yet: a's children are still
// stopping.
type lateRenewal struct {
	t        *testing.T
	client   *fake.Clientset
	clk      *clocktesting.FakeClock
	e        *Elector
	gate     *gatedStore
	gains    atomic.Int32
	dones    chan func()
	done     func() // the loss's
	last     *coordinationv1.Lease
	deadline time.Time
}

func newLateRenewal(t *testing.T) *lateRenewal {
	r := &lateRenewal{t: t, client: fake.NewClientset(), clk: clocktesting.NewFakeClock(time.Now()), dones: make(chan func(), 4),
		deadline: time.Now().Add(wait)}
	j := newJournal()
	e, err := New(Config{Client: r.client, Namespace: testNamespace, Name: testGroup, Identity: "a", SingleLease: true,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: r.clk,
		Callbacks: Callbacks{
			Acquired: func(i int) { j.start("a", i); r.gains.Add(1) },
			Release:  func(i int, done func()) { j.stop("a", i); done() },
			Lost: func(i int, _ string, done func()) {
				j.stop("a", i)
				r.dones <- done // called by the test: the children are still stopping
			},
		}})
	require.NoError(t, err)
	r.e, r.gate = e, newGatedStore(e.store)
	e.store = r.gate
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); e.Run(ctx) }()
	<-e.ticking
	t.Cleanup(func() {
		r.open()
		cancel()
		for {
			select {
			case <-stopped:
				j.check(t)
				return
			case <-time.After(poll):
				r.clk.Step(retryPeriod)
			}
		}
	})
	r.stepUntil("a acquires the Lease", func() bool { return r.gains.Load() == 1 })

	// A renewal answered before the clock moves on; then the next one
	// reads the Lease and is held before its write; only it: what a
	// writes afterwards goes through.
	r.renewal()
	r.gate.hold.Store(true)
	r.clk.Step(retryPeriod)
	select {
	case <-r.gate.entered:
	case <-time.After(wait):
		t.Fatal("a's renewal did not reach its write")
	}
	r.gate.hold.Store(false)

	// The renew deadline passes, a quarter of a retry period at a time,
	// each step seen by the deadline watcher before the next: it gives the
	// lease up, and a's children begin to stop.
	for r.done == nil {
		require.False(t, time.Now().After(r.deadline), "the deadline watcher did not give the lease up")
		checks := e.deadlineChecks.Load()
		r.clk.Step(retryPeriod / 4)
		require.Eventually(t, func() bool { return e.deadlineChecks.Load() > checks }, wait, poll)
		select {
		case r.done = <-r.dones:
		default:
		}
	}
	r.last = r.stored()
	return r
}

// renewal moves the clock a retry period at a time until a's renewal sent
// then has been answered then (or a has lost the Lease): a renewal sent
// at an earlier step and answered at this one does not count, nor does a
// tick that sent none because that renewal was still in flight.
func (r *lateRenewal) renewal() {
	r.t.Helper()
	for {
		r.clk.Step(retryPeriod)
		require.Eventually(r.t, func() bool {
			r.e.mu.Lock()
			at, held := r.e.renewed[0]
			r.e.mu.Unlock()
			return held && at.Equal(r.clk.Now()) || len(r.dones) > 0
		}, wait, poll, "a's renewal was not answered")
		if len(r.dones) > 0 || r.stored().Spec.RenewTime.Equal(ptr.To(microTime(r.clk.Now()))) {
			return
		}
	}
}

func (r *lateRenewal) stored() *coordinationv1.Lease {
	l, err := r.client.CoordinationV1().Leases(testNamespace).Get(context.Background(), testGroup, metav1.GetOptions{})
	require.NoError(r.t, err)
	return l
}

// open lets the held renewal land (once).
func (r *lateRenewal) open() {
	select {
	case <-r.gate.open:
	default:
		close(r.gate.open)
	}
}

// stepUntil moves the clock a fifth of a retry period at a time until cond.
func (r *lateRenewal) stepUntil(what string, cond func() bool) {
	r.t.Helper()
	for !cond() {
		require.False(r.t, time.Now().After(r.deadline), "timed out waiting until %s", what)
		<-time.After(poll)
		r.clk.Step(retryPeriod / 5)
	}
}

// updates counts the Lease updates the fake clientset has taken.
func (r *lateRenewal) updates() int {
	n := 0
	for _, a := range r.client.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "leases" {
			n++
		}
	}
	return n
}

// provesTheHold checks that the last renewal before the held one still
// proves the hold: no rival may have taken the Lease yet.
func (r *lateRenewal) provesTheHold() {
	r.t.Helper()
	require.True(r.t, r.clk.Since(r.last.Spec.RenewTime.Time) < leaseDuration-r.e.cfg.clockSkewMargin()-retryPeriod/2,
		"the test must land the renewal while the last renewal still proves the hold, with a margin: it was sent %s ago",
		r.clk.Since(r.last.Spec.RenewTime.Time))
}

// a's renewal lands after the deadline watcher has given the lease up,
// long before the Lease could have expired for anybody (the last
// renewal's proof still stands), while a's children are still stopping.
// No rival can have taken the Lease in that moment, so the write is a's
// own, not one over a rival's: once its fence is done, a campaigns for the
// Lease at once, as it does where the Lease has versions, rather than
// waiting it out for a lease duration as anybody's (suspect). Before, the
// renewal counted as late because the deadline watcher had ended its term,
// and a took the Lease again 5.4s after its fence (a lease duration of
// 4s), or a standby took it first.
func TestUnversionedRenewalLandingAfterTheDeadlineIsCampaignedOnAtOnce(t *testing.T) {
	r := newLateRenewal(t)
	r.provesTheHold()

	// The renewal lands, and its answer reaches the loop; then the fence
	// is done. The clock stands still from here on.
	r.open()
	r.e.writes.Wait()
	require.True(t, r.stored().Spec.RenewTime.After(r.last.Spec.RenewTime.Time), "the held renewal landed")
	before := r.updates()
	r.done()
	require.Eventually(t, func() bool { return r.updates() > before }, wait, poll,
		"a did not campaign for its own Lease, its fence done, without waiting for the clock")

	// The campaign's read-back, confirmAfter later: a holds the Lease again.
	r.stepUntil("a acquires the Lease again", func() bool { return r.gains.Load() == 2 })
}

// a's fence is done while its renewal is still held, then the renewal
// lands. On a store without versions nothing refuses it: a campaign sent
// meanwhile would be written over by it, the renew time gone back, and a's
// next renewal would find the Lease written by another and lose it again
// (a campaign read back before the renewal lands would count). So a
// campaigns only once that renewal has been answered: its write is the
// first a makes after the loss. Before, a campaigned at once.
func TestUnversionedRenewalLandingAfterTheFenceIsWaitedFor(t *testing.T) {
	r := newLateRenewal(t)
	lostAt := r.clk.Now()
	r.done()
	// A retry period, handled: a tick at which a would campaign, were it
	// to (a campaign sent then leaves the tick uncounted until its
	// read-back, which waits for the clock: the wait times out).
	ticks := r.e.ticks.Load()
	r.clk.Step(retryPeriod)
	require.Eventually(t, func() bool { return r.e.ticks.Load() > ticks }, wait, poll,
		"a's tick after its fence was not handled: a campaign of it waits for its read-back")
	// And time for such a campaign's read-back (confirmAfter).
	for range int(renewDeadline/3/(retryPeriod/5)) + 1 {
		<-time.After(poll)
		r.clk.Step(retryPeriod / 5)
	}
	r.provesTheHold()
	r.open()
	r.stepUntil("a acquires the Lease again", func() bool { return r.gains.Load() >= 2 })

	// A few renewals, each answered before the next (or the Lease lost):
	// none finds the Lease written by another.
	for range 4 {
		r.renewal()
	}
	// The held renewal is the last write a sent before its loss: no write
	// sent after the loss (a campaign) may have reached the store first.
	var renewTimes []time.Time // of a's updates, in the order the store took them
	for _, a := range r.client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			renewTimes = append(renewTimes, u.GetObject().(*coordinationv1.Lease).Spec.RenewTime.Time)
		}
	}
	held := -1
	for k, at := range renewTimes {
		if at.Before(lostAt) && (held < 0 || at.After(renewTimes[held])) {
			held = k
		}
	}
	require.GreaterOrEqual(t, held, 0)
	for _, at := range renewTimes[:held] {
		assert.True(t, at.Before(lostAt), "a write a sent %s after its loss reached the store before its renewal held from before it",
			at.Sub(lostAt))
	}
	select {
	case done := <-r.dones:
		done()
		t.Error("a lost the Lease again, to its own renewal sent before its loss")
	default:
	}
	assert.Equal(t, int32(2), r.gains.Load())
}

// a holds the Lease and stops; its release is held after its read while
// the Lease expires and another replica takes it over; then the release
// lands over the new holder's record: no holder, and a's transitions,
// fewer than the new holder's. The new holder loses at its next renewal,
// but its children may run until its fence is done: the third replica,
// seeing a Lease no one holds, must wait the new holder's lease duration
// out, as if the stale record were its renewal. It used to take it at once
// (found by a review: two replicas ran, 20 of 20).
func TestUnversionedLateReleaseOverANewHolderIsWaitedOut(t *testing.T) {
	u := newUnversioned(t)
	ga := u.start("a", false)
	u.stepUntil("a holds the Lease", func() bool { return len(u.gains("a")) == 1 })
	u.start("b", false)
	u.start("c", false)
	ga.holdIf = func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.HolderIdentity, "") == "" }
	ga.hold.Store(true)
	ga.stop()
	u.entered(ga, "a's release has read the Lease and writes")
	u.stepUntil("another replica takes the expired Lease over", func() bool { return len(u.gains("b"))+len(u.gains("c")) == 1 })
	holder, other := "b", "c"
	if len(u.gains("c")) == 1 {
		holder, other = "c", "b"
	}
	landed := u.clock.Now()
	ga.hold.Store(false)
	close(ga.open)

	u.stepUntil(holder+" loses the Lease a's release wrote over", func() bool { return u.losses(holder) == 1 })
	u.stepUntil("the Lease is held again", func() bool { return len(u.gains("b"))+len(u.gains("c")) == 2 })
	u.journal.check(t)
	for _, at := range u.gains(other) {
		require.False(t, at.Before(landed.Add(leaseDuration)),
			"%s took the Lease %s after a's late release landed over %s's term, before that term could have ended", other, at.Sub(landed), holder)
	}
}

// A takeover whose read and write took the whole confirm window is not
// counted, and the error (logged at Warn) says what would let calls that
// slow confirm one: a RenewDeadline above three times their time, or, past
// the window's 1s cap, a store that keeps versions.
func TestUnconfirmedTakeoverSaysWhatWouldConfirmIt(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: testGroup, Namespace: testNamespace}}
	for _, c := range []struct {
		deadline, took time.Duration
		want           string
	}{
		{600 * time.Millisecond, 250 * time.Millisecond, "a RenewDeadline above 750ms (on every replica)"},
		{15 * time.Second, 1200 * time.Millisecond, "use a store that keeps versions"},
	} {
		e := &Elector{cfg: Config{RenewDeadline: c.deadline}}
		_, err := e.confirm(context.Background(), lease, c.took)
		require.ErrorIs(t, err, errUnconfirmed)
		require.ErrorContains(t, err, c.want)
	}
}
