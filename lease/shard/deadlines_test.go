package shard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// A renewal answered with success after the deadline watcher has given
// its shard up, but before the loop has taken that in, must not bring the
// shard's deadline back. Before, renewedShard published the renewal for
// the watcher (the loop still held the shard), absorbEarly then dropped
// the shard but left that entry, and a renew deadline later the watcher
// lost the shard a second time: a second Lost (a second ShardLost, a
// "stopped leading" Event, a fencing) for a shard no longer held, and no
// campaign for it until that fencing's done. The interleaving needs the
// answer to land between the watcher's check and the loop's next pass, so
// the test makes the loop's steps itself, in that order, on an Elector
// that is not running.
func TestARenewalAnsweredAfterTheDeadlineLosesTheShardOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	var lost []int
	e, err := New(Config{Client: leasetest.NewServer().Client("a"), Namespace: testNamespace, Name: testGroup, Identity: "a",
		Shards: 1, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: clk,
		Callbacks: Callbacks{Lost: func(i int, _ string, _ func()) {
			lost = append(lost, i) // done is held: the shard's children are still stopping
		}}})
	require.NoError(t, err)

	// a holds shard 0, renewed now, and a renewal is in flight.
	term := lease.NewTerm(clk, ShardLease(testGroup, 0), leaseDuration, time.Second)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: ShardLease(testGroup, 0), ResourceVersion: "7"}}
	h := &held{lease: l, renewedAt: clk.Now(), term: term, writing: true}
	e.held[0] = h
	e.mu.Lock()
	e.terms[0], e.renewed[0] = term, h.renewedAt
	e.publishTerms()
	e.mu.Unlock()

	// The renew deadline passes: the watcher gives the shard up.
	clk.Step(renewDeadline + time.Millisecond)
	e.checkDeadlines()
	require.Equal(t, []int{0}, lost)
	require.ErrorIs(t, e.Guard(0)(), lease.ErrNotHeld)

	// The renewal is answered, written, before the loop's next pass (the
	// loop handles the answer, then absorbs the loss).
	answered := l.DeepCopy()
	answered.ResourceVersion = "8"
	e.renewedShard(&written{kind: writeRenewal, shard: 0, h: h, got: answered})
	e.absorbEarly()
	require.Nil(t, e.held[0], "the loss is taken in")
	require.ErrorIs(t, e.Guard(0)(), lease.ErrNotHeld, "the late answer does not revive the guard")

	// Another renew deadline, and more: the shard is not lost again.
	for range 3 {
		clk.Step(renewDeadline)
		e.checkDeadlines()
		e.absorbEarly()
	}
	require.Equal(t, []int{0}, lost, "a shard no longer held was lost again")
	require.True(t, e.fencing[0], "still waiting for the first loss's done")
}

// An Acquired (or a "became leader" RecordEvent) that blocks past the
// renew deadline: the watcher must not deliver the shard's Lost before
// its Acquired. Before, the watcher (its own goroutine) lost the shard
// while the loop was still in the callback, and the user got Lost, then
// Acquired: a shard counted held after its loss (the supervisor answers a
// Lost for a shard it does not hold Fenced, and then starts the shard's
// children on Acquired). The watcher runs here inside the callback, as it
// would beside it.
func TestALostNeverComesBeforeItsAcquired(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	var order []string
	var e *Elector
	e, err := New(Config{Client: leasetest.NewServer().Client("a"), Namespace: testNamespace, Name: testGroup, Identity: "a",
		Shards: 1, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: clk,
		Callbacks: Callbacks{
			Acquired: func(i int) {
				clk.Step(renewDeadline + time.Millisecond) // the callback blocks past the deadline
				e.checkDeadlines()                         // the watcher's tick meanwhile
				order = append(order, "acquired")
			},
			Lost: func(i int, _ string, done func()) {
				order = append(order, "lost")
				done()
			},
		}})
	require.NoError(t, err)

	term := lease.NewTerm(clk, ShardLease(testGroup, 0), leaseDuration, time.Second)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: ShardLease(testGroup, 0), ResourceVersion: "1"}}
	e.campaigning[0] = true
	e.campaigned(&written{kind: writeCampaign, shard: 0, got: l, term: term, sent: term.Elapsed()})
	require.Equal(t, []string{"acquired"}, order, "Lost was delivered before Acquired returned")

	e.checkDeadlines() // the watcher's next tick: the deadline has passed
	require.Equal(t, []string{"acquired", "lost"}, order)
}

// A write answered late counts from when it was sent, not from its
// answer: it may have landed as it was sent, and a standby that saw it
// takes the shard over a lease duration after that, however late our
// answer came. Before, renewedAt was the answer's time: a renewal (or a
// campaign) answered D after it landed, then a cut, kept the shard D past
// its renew deadline, and with D > LeaseDuration − RenewDeadline (a
// renewal's own timeout allows up to RenewDeadline) two replicas ran the
// shard's controllers at once (a review's TestRevSlowRenewalAnswerOverlaps,
// 7 of 7 at 3s/2s/250ms with a 1.6s answer).
func TestAWriteAnsweredLateCountsFromItsSendTime(t *testing.T) {
	const late = renewDeadline - retryPeriod // well within a renewal's timeout
	for name, kind := range map[string]writeKind{"renewal": writeRenewal, "campaign": writeCampaign} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
			var lost []int
			e, err := New(Config{Client: leasetest.NewServer().Client("a"), Namespace: testNamespace, Name: testGroup, Identity: "a",
				Shards: 1, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: clk,
				Callbacks: Callbacks{Lost: func(i int, _ string, _ func()) { lost = append(lost, i) }}})
			require.NoError(t, err)
			term := lease.NewTerm(clk, ShardLease(testGroup, 0), leaseDuration, time.Second)
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: ShardLease(testGroup, 0), ResourceVersion: "7"}}
			sent := clk.Now()
			w := &written{kind: kind, shard: 0, got: l, term: term, at: sent, sent: term.Elapsed()}
			if kind == writeRenewal {
				h := &held{lease: l, renewedAt: sent.Add(-retryPeriod), term: term, writing: true}
				e.held[0], w.h = h, h
				e.mu.Lock()
				e.terms[0], e.renewed[0] = term, h.renewedAt
				e.publishTerms()
				e.mu.Unlock()
			} else {
				e.campaigning[0] = true
			}

			clk.Step(late) // the write landed as it was sent; its answer comes now
			if kind == writeRenewal {
				e.renewedShard(w)
			} else {
				e.campaigned(w)
			}
			require.NotNil(t, e.held[0])
			require.Empty(t, lost)

			// Cut off: nothing more is renewed. RenewDeadline after the send,
			// the shard is lost, not RenewDeadline after the answer.
			clk.SetTime(sent.Add(renewDeadline + time.Millisecond))
			e.checkDeadlines()
			require.Equal(t, []int{0}, lost, "not lost %s after the write was sent (answered %s after it)", renewDeadline, late)
		})
	}
}
