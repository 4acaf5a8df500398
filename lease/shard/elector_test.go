package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

const (
	testNamespace = "ns"
	testGroup     = "ctl"
	leaseDuration = 4 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
	wait          = 20 * time.Second
	poll          = 2 * time.Millisecond
)

// journal records which replica runs each shard's children, as the
// callbacks say, and every time two would have run one shard at once.
type journal struct {
	mu         sync.Mutex
	running    map[int]string
	violations []string
	acquired   []string // "replica:shard", in order
}

func newJournal() *journal { return &journal{running: map[int]string{}} }

func (j *journal) start(id string, shard int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if other := j.running[shard]; other != "" {
		j.violations = append(j.violations, fmt.Sprintf("shard %d started on %s while running on %s", shard, id, other))
	}
	j.running[shard] = id
	j.acquired = append(j.acquired, fmt.Sprintf("%s:%d", id, shard))
}

func (j *journal) stop(id string, shard int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.running[shard] == id {
		delete(j.running, shard)
	}
}

func (j *journal) check(t *testing.T) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	assert.Empty(t, j.violations)
}

// group is replicas sharing one leasetest server and one fake clock.
type group struct {
	t        *testing.T
	shards   int
	single   bool // Config.SingleLease
	server   *leasetest.Server
	clock    *clocktesting.FakeClock
	journal  *journal
	replicas map[string]*replica
	// wrap, when set, wraps the store of the replicas started from then on
	// (a test's hook into their reads and writes).
	wrap func(leaseStore) leaseStore
	// client, when set, is the clientset the replicas started from then on
	// are given in place of their leasetest client (a test's hook into
	// their lists and watches).
	client func(*leasetest.Client) kubernetes.Interface
	// awaitWatches: step waits, before it moves the clock, until every
	// replica not cut off has been shown the server's last write. A test
	// that counts requests or periods sets it: stepped faster than a
	// loaded machine runs the watches, a replica would take its lagging
	// watch for a silent one (and poll), or see a change a period late.
	// Only for tests whose every write is in the group's watch.
	awaitWatches bool
}

type replica struct {
	id     string
	client *leasetest.Client
	e      *Elector
	cancel context.CancelFunc
	done   chan struct{}
	lost   chan int

	mu      sync.Mutex
	holders []string // HolderChanged's identities, in order
	reasons []string // Lost's reasons, in order
}

func (r *replica) seenHolders() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.holders)
}

func newGroup(t *testing.T, shards int) *group {
	g := &group{t: t, shards: shards, server: leasetest.NewServer(), clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)),
		journal: newJournal(), replicas: map[string]*replica{}}
	t.Cleanup(func() {
		for _, r := range g.replicas {
			r.client.Partition(false)
			r.cancel()
		}
		for _, r := range g.replicas {
			g.waitDone(r)
		}
		g.journal.check(t)
	})
	return g
}

func (g *group) waitDone(r *replica) {
	g.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case <-r.done:
			return
		case <-deadline:
			g.t.Fatalf("%s: Run did not return", r.id)
		case <-time.After(10 * time.Millisecond):
			// A release that failed is retried each retry period.
			g.clock.Step(retryPeriod)
		}
	}
}

func (g *group) start(id string) *replica {
	r := &replica{id: id, client: g.server.Client(id), done: make(chan struct{}), lost: make(chan int, 64)}
	var client kubernetes.Interface = r.client
	if g.client != nil {
		client = g.client(r.client)
	}
	e, err := New(Config{Client: client, Namespace: testNamespace, Name: testGroup, Identity: id, Shards: g.shards,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: g.clock, SingleLease: g.single,
		Callbacks: Callbacks{
			Acquired: func(i int) { g.journal.start(id, i) },
			Release:  func(i int, done func()) { g.journal.stop(id, i); done() },
			Lost: func(i int, reason string, done func()) {
				g.journal.stop(id, i)
				r.mu.Lock()
				r.reasons = append(r.reasons, reason)
				r.mu.Unlock()
				r.lost <- i
				done()
			},
			HolderChanged: func(_ int, identity string) {
				r.mu.Lock()
				r.holders = append(r.holders, identity)
				r.mu.Unlock()
			},
		}})
	require.NoError(g.t, err)
	r.e = e
	if g.wrap != nil {
		e.store = g.wrap(e.store)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); e.Run(ctx) }()
	<-e.ticking // a step from now on reaches it
	g.replicas[id] = r
	return r
}

// holderAndStandby starts a, which takes the one Lease, then b, which
// stands by, and returns them with the Lease's name.
func (g *group) holderAndStandby() (a, b *replica, name string) {
	g.t.Helper()
	a, name = g.holderAlone()
	b = g.start("b")
	g.settle("b standing by")
	return a, b, name
}

// stop ends r gracefully: it releases its shards.
func (g *group) stop(id string) {
	r := g.replicas[id]
	r.cancel()
	g.waitDone(r)
	delete(g.replicas, id)
}

// crash ends r as a SIGKILL would: cut off, nothing released. Its Run,
// which cannot release anything, is waited for at the end of the test, so
// that the clock moves only by the test's steps meanwhile.
func (g *group) crash(id string) {
	r := g.replicas[id]
	r.client.Partition(true)
	r.cancel()
	delete(g.replicas, id)
	g.t.Cleanup(func() { g.waitDone(r) })
}

// step advances the clock by one retry period and waits until every
// replica has handled it.
func (g *group) step() {
	g.t.Helper()
	if g.awaitWatches {
		latest := g.server.LatestVersion()
		for id, r := range g.replicas {
			if !r.client.Partitioned() {
				require.Eventually(g.t, func() bool { return r.e.shown.Load() >= latest }, wait, poll,
					"%s's watch did not show version %d (shown %d)", id, latest, r.e.shown.Load())
			}
		}
	}
	before := map[string]int64{}
	for id, r := range g.replicas {
		before[id] = r.e.ticks.Load()
	}
	g.clock.Step(retryPeriod)
	for id, r := range g.replicas {
		require.Eventually(g.t, func() bool { return r.e.ticks.Load() > before[id] }, wait, poll, "%s did not tick (%d, waiters %v)", id, r.e.ticks.Load(), g.clock.HasWaiters())
	}
}

// holders returns every shard's holder on the server.
func (g *group) holders() []string {
	out := make([]string, g.shards)
	for i := range out {
		name := ShardLease(testGroup, i)
		if g.single {
			name = testGroup
		}
		out[i] = g.server.Holder(testNamespace, name)
	}
	return out
}

// settled reports whether the server shows every shard held by a live
// replica, balanced, and every replica's Status agreeing.
func (g *group) settled() bool { return g.placed() && g.agreed() }

// placed reports whether the server shows every shard held by a live
// replica, balanced.
func (g *group) placed() bool {
	hs := g.holders()
	n := map[string]int{}
	for _, h := range hs {
		if g.replicas[h] == nil {
			return false
		}
		n[h]++
	}
	lo, hi := g.shards/len(g.replicas), (g.shards+len(g.replicas)-1)/len(g.replicas)
	for id := range g.replicas {
		if n[id] < lo || n[id] > hi {
			return false
		}
	}
	return true
}

// agreed reports whether every replica's Status shows what the server does.
func (g *group) agreed() bool {
	hs := g.holders()
	for id, r := range g.replicas {
		for _, s := range r.e.Status() {
			if s.Held != (hs[s.Index] == id) || s.Holder != hs[s.Index] {
				return false
			}
		}
	}
	return true
}

// settle waits until settled, without touching the clock: what the watch
// alone achieves.
func (g *group) settle(what string) []string {
	g.t.Helper()
	require.Eventually(g.t, g.settled, wait, poll, "%s: not settled: %v", what, g.holders())
	return g.holders()
}

// settleStepping waits until the Leases are placed, advancing the clock a
// retry period at a time, then until every replica's Status agrees without
// touching the clock; it returns how many periods the placement took.
func (g *group) settleStepping(what string, max int) int {
	g.t.Helper()
	for n := 0; n <= max; n++ {
		if g.placed() {
			g.settle(what)
			return n
		}
		g.step()
	}
	g.t.Fatalf("%s: not settled after %d retry periods: %v", what, max, g.holders())
	return 0
}

func TestElectorBalanceJoinLeaveCrash(t *testing.T) {
	for _, shards := range []int{1, 4, 12, 32} {
		for _, replicas := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("S=%d/R=%d", shards, replicas), func(t *testing.T) {
				g := newGroup(t, shards)
				g.awaitWatches = true // the crash's periods are counted
				for i := range replicas {
					g.start(fmt.Sprintf("r%d", i))
				}
				before := g.settle("start")

				// A join moves shards only to the joiner, ⌊S/R⌋ of them,
				// without waiting for any lease to expire.
				g.start("joiner")
				after := g.settle("join")
				moved := 0
				for s := range before {
					if before[s] != after[s] {
						assert.Equal(t, "joiner", after[s], "shard %d moved to a non-joiner", s)
						moved++
					}
				}
				assert.Equal(t, shards/(replicas+1), moved)

				// A graceful leave moves only the leaver's shards, at once.
				g.stop("joiner")
				left := g.settle("leave")
				for s := range after {
					if after[s] != "joiner" {
						assert.Equal(t, after[s], left[s], "shard %d moved on a leave", s)
					}
				}
				if replicas == 1 {
					return
				}

				// A crash: its shards move once its Leases expire, within
				// LeaseDuration and a retry or two; only its shards.
				g.crash("r0")
				periods := g.settleStepping("crash", 4*int(leaseDuration/retryPeriod))
				assert.LessOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration+2*retryPeriod)
				crashed := g.holders()
				for s := range left {
					if left[s] != "r0" {
						assert.Equal(t, left[s], crashed[s], "shard %d moved on r0's crash", s)
					}
				}
			})
		}
	}
}

func TestElectorStolenShardIsLostAtOnce(t *testing.T) {
	g := newGroup(t, 4)
	a := g.start("a")
	g.settle("start")
	require.NoError(t, g.server.Steal(testNamespace, ShardLease(testGroup, 2), "thief", leaseDuration))
	select {
	case i := <-a.lost:
		assert.Equal(t, 2, i)
	case <-time.After(wait):
		t.Fatal("the stolen shard was not lost")
	}
	// Status is published once the loop has handled the change.
	require.Eventually(t, func() bool { st := a.e.Status()[2]; return !st.Held && st.Holder == "thief" }, wait, poll)
	// The thief is no member: once its Lease expires, the shard comes back.
	periods := g.settleStepping("after the theft", 4*int(leaseDuration/retryPeriod))
	assert.LessOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration+2*retryPeriod)
}

// TestElectorPartitionedHolderFencesFirst cuts a holder off: it must lose
// its shards (RenewDeadline) before the others take them (LeaseDuration),
// which the journal checks; reconnected, it rejoins and gets its share back.
func TestElectorPartitionedHolderFencesFirst(t *testing.T) {
	g := newGroup(t, 12)
	for _, id := range []string{"a", "b", "c"} {
		g.start(id)
	}
	g.settle("start")
	a := g.replicas["a"]
	var had []int
	for _, s := range a.e.Status() {
		if s.Held {
			had = append(had, s.Index)
		}
	}
	a.client.Partition(true)
	var lost []int
	for len(lost) < len(had) {
		g.step()
	drain:
		for {
			select {
			case i := <-a.lost:
				lost = append(lost, i)
			default:
				break drain
			}
		}
		for _, h := range g.holders() {
			if h != "a" {
				continue
			}
		}
	}
	slices.Sort(lost)
	assert.Equal(t, had, lost)
	// b and c take a's shards over; a, cut off, still counts itself in.
	delete(g.replicas, "a")
	g.settleStepping("a cut off", 4*int(leaseDuration/retryPeriod))
	g.replicas["a"] = a
	a.client.Partition(false)
	g.settleStepping("a back", 4*int(leaseDuration/retryPeriod))
	g.journal.check(t)
}

// TestElectorSteadyStateRequests counts the Lease requests of 3 settled
// replicas per retry period: one update per held shard and one per member
// Lease, nothing else (no polling of Leases held by others: the watch tells).
// S client-go LeaderElectors on 3 replicas would make 3·S gets and S updates.
func TestElectorSteadyStateRequests(t *testing.T) {
	for _, shards := range []int{4, 12, 32} {
		t.Run(fmt.Sprintf("S=%d", shards), func(t *testing.T) {
			g := newGroup(t, shards)
			g.awaitWatches = true // a lagging watch polled would be a list
			for _, id := range []string{"a", "b", "c"} {
				g.start(id)
			}
			g.settleStepping("start", 10)
			g.step() // a full period after settling
			count := func() map[string]int {
				n := map[string]int{}
				for _, r := range g.replicas {
					for _, a := range r.client.Actions() {
						n[a.GetVerb()]++
					}
				}
				return n
			}
			before := count()
			const periods = 4
			for range periods {
				g.step()
			}
			after := count()
			for verb := range after {
				if after[verb] -= before[verb]; after[verb] == 0 {
					delete(after, verb)
				}
			}
			assert.Equal(t, map[string]int{"update": periods * (shards + 3)}, after)
			t.Logf("S=%d, 3 replicas: %d Lease requests per retry period (S client-go electors: %d)", shards, (shards + 3), 4*shards)
		})
	}
}

// An API server that stops answering (paused, or a connection that
// black-holes requests) holds the loop in its renewal calls: the deadline
// watcher must still give every held shard up within RenewDeadline (plus a
// quarter retry period) of its last renewal, while those calls hang, so
// that its children stop before another replica may take it.
func TestLossIsNotDelayedByAHangingAPIServer(t *testing.T) {
	g := newGroup(t, 3)
	a := g.start("a")
	g.settle("a alone")
	require.NoError(t, a.e.CheckAny(), "a holds every shard")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = a.e.CheckAny() }), "CheckAny allocates when it passes")
	hang := make(chan struct{})
	var hung atomic.Bool
	a.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if hung.Load() {
			<-hang // as a request to a server that never answers: the fake ignores contexts
		}
		return false, nil, nil
	})
	t.Cleanup(func() { close(hang) })
	hung.Store(true)
	// Each step waits until the deadline watcher has checked after it
	// (Lost is called within the check), so that no step outruns it.
	stepChecked := func(d time.Duration) {
		t.Helper()
		before := a.e.deadlineChecks.Load()
		g.clock.Step(d)
		require.Eventually(t, func() bool { return a.e.deadlineChecks.Load() > before }, wait, poll, "the deadline watcher did not check")
	}
	require.Eventually(t, func() bool { return a.e.deadlineChecks.Load() > 0 }, wait, poll, "the deadline watcher has no ticker")
	stepChecked(retryPeriod) // a tick: every renewal goes out, and hangs
	// Step in quarters of a retry period, as the watcher ticks, until past
	// the renew deadline since the last renewal.
	lost := map[int]bool{}
	for stepped := retryPeriod; len(lost) < 3; stepped += retryPeriod / 4 {
		require.LessOrEqual(t, stepped, renewDeadline+retryPeriod, "not every shard was lost within the renew deadline + a retry period (lost %v)", lost)
		stepChecked(retryPeriod / 4)
	drain:
		for {
			select {
			case i := <-a.lost:
				lost[i] = true
			default:
				break drain
			}
		}
	}
	for i := range 3 {
		require.ErrorIs(t, a.e.Guard(i)(), lease.ErrNotHeld, "shard %d's guard after the loss", i)
	}
	require.ErrorIs(t, a.e.CheckAny(), lease.ErrNotHeld, "no shard held any more")
}

// A renewal written on the server whose answer is lost (a client timeout)
// must not cost the shard: the watch shows the write, and the next renewal
// goes on from it instead of being refused with a conflict.
func TestARenewalWhoseAnswerIsLostKeepsTheShard(t *testing.T) {
	g := newGroup(t, 1)
	a := g.start("a")
	g.settle("a alone")
	shadow := g.server.Client("a-shadow")
	var armed atomic.Bool
	a.client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if l.Labels[LabelRole] != RoleShard || !armed.CompareAndSwap(true, false) {
			return false, nil, nil
		}
		if _, err := shadow.CoordinationV1().Leases(l.Namespace).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			return true, nil, err
		}
		return true, nil, context.DeadlineExceeded // written, but the answer never came
	})
	armed.Store(true)
	g.step() // the renewal is written; a hears nothing back
	require.False(t, armed.Load(), "the renewal went out")
	for range 4 {
		g.step()
	}
	select {
	case i := <-a.lost:
		t.Fatalf("shard %d lost after a renewal whose answer was lost", i)
	default:
	}
	assert.Equal(t, []string{"a"}, g.holders())
	require.NoError(t, a.e.Guard(0)())
}

// A stop must not wait for the campaigns in flight, nor send any more: each
// is an API call, bounded by a retry period against a real server. Here
// the first campaign hangs until the stop is requested (the others queue
// behind it in the fake clientset); those that then win their shard
// release it at once, without Acquired (nothing may run on a stopping
// replica), and none is made again after the stop.
func TestAStopCutsTheCampaignsShort(t *testing.T) {
	g := newGroup(t, 12)
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	var campaigns atomic.Int32
	client := g.server.Client("a")
	client.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		if l.Labels[LabelRole] == RoleShard {
			campaigns.Add(1)
			select {
			case entered <- struct{}{}:
			default:
			}
			<-gate // as a request to a slow server: the fake ignores contexts
		}
		return false, nil, nil
	})
	r := &replica{id: "a", client: client, done: make(chan struct{}), lost: make(chan int, 64)}
	e, err := New(Config{Client: client, Namespace: testNamespace, Name: testGroup, Identity: "a", Shards: g.shards,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: g.clock,
		Callbacks: Callbacks{
			Acquired: func(i int) { g.journal.start("a", i) },
			Release:  func(i int, done func()) { g.journal.stop("a", i); done() },
			Lost:     func(i int, _ string, done func()) { g.journal.stop("a", i); done() },
		}})
	require.NoError(t, err)
	r.e = e
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); e.Run(ctx) }()
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("a never campaigned")
	}
	cancel()
	close(gate)
	g.waitDone(r)
	assert.LessOrEqual(t, campaigns.Load(), int32(g.shards), "campaigns made by a replica asked to stop: one per shard at most")
	g.journal.mu.Lock()
	assert.Empty(t, g.journal.acquired, "shards acquired by a stopping replica")
	g.journal.mu.Unlock()
	for i, h := range g.holders() {
		assert.Empty(t, h, "shard %d still held after the stop", i)
	}
}

// A watch lagging behind after a renewal whose answer was lost must not
// make the elector adopt an older version of its own Lease: the next
// renewal from it would be refused, and the shard lost for nothing. Only a
// version of ours renewed after the last answered write is adopted. The
// loop's decision is driven here directly, without Run.
func TestALaggingWatchIsNotAdopted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	e, err := New(Config{Client: leasetest.NewServer().Client("a"), Namespace: testNamespace, Name: testGroup, Identity: "a", Shards: 1,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod, Clock: clk})
	require.NoError(t, err)
	version := func(rv string, renewed time.Time) *coordinationv1.Lease {
		id, at := "a", metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: ShardLease(testGroup, 0), Namespace: testNamespace, ResourceVersion: rv,
				Labels: map[string]string{LabelGroup: testGroup, LabelRole: RoleShard}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &at},
		}
	}
	t0 := clk.Now()
	answered := version("5", t0.Add(2*retryPeriod)) // the last renewal answered
	h := &held{lease: answered, renewedAt: t0, term: lease.NewTerm(clk, "x", leaseDuration, 0), confirmed: true, unsure: true}
	e.held[0] = h

	for _, tc := range []struct {
		name    string
		seen    *coordinationv1.Lease
		adopted bool
	}{
		{"an older version of ours, from a lagging watch", version("3", t0), false},
		{"the answered version itself", version("5", t0.Add(2*retryPeriod)), false},
		{"the unanswered renewal, written after the answered one", version("6", t0.Add(3*retryPeriod)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.see(tc.seen)
			if tc.adopted {
				assert.Equal(t, tc.seen.ResourceVersion, e.held[0].lease.ResourceVersion, "adopted")
				assert.False(t, e.held[0].unsure)
			} else {
				assert.Equal(t, "5", e.held[0].lease.ResourceVersion, "the version renewals go on from")
			}
			require.Same(t, h, e.held[0], "the shard is still held")
		})
	}
}

// newOneLeaseGroup is a group of one shard, or of the single lease.
func newOneLeaseGroup(t *testing.T, single bool) *group {
	g := newGroup(t, 1)
	g.single = single
	return g
}

// holderAlone starts replica a alone and waits until it holds shard 0 (or
// the single lease), whose Lease's name it returns.
func (g *group) holderAlone() (a *replica, name string) {
	g.t.Helper()
	a = g.start("a")
	g.settle("a alone")
	return a, g.lease0()
}

// admin is the Lease client of someone outside the group (kubectl, a
// GitOps tool).
func (g *group) admin() coordinationv1client.LeaseInterface {
	return g.server.Client("admin").CoordinationV1().Leases(testNamespace)
}

// lease0 is the name of the Lease of shard 0, or of the single lease.
func (g *group) lease0() string {
	if g.single {
		return testGroup
	}
	return ShardLease(testGroup, 0)
}

// TestAForeignWriteThatKeepsTheHolderKeepsTheShard: someone other than the
// electors (kubectl label, a GitOps tool's annotation) updates the held
// Lease without touching its holder. The holder's next renewal, made from
// the version it wrote, is refused with a conflict; the Lease still names
// it, in the same term, so it reads it and renews from there, as
// client-go's elector does at its next try, instead of losing the shard
// and fencing every controller for a label.
func TestAForeignWriteThatKeepsTheHolderKeepsTheShard(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			a, name := g.holderAlone()
			admin := g.admin()
			for round := range 3 {
				l, err := admin.Get(context.Background(), name, metav1.GetOptions{})
				require.NoError(t, err)
				if l.Annotations == nil {
					l.Annotations = map[string]string{}
				}
				l.Annotations["example.com/touched"] = fmt.Sprint(round)
				_, err = admin.Update(context.Background(), l, metav1.UpdateOptions{})
				require.NoError(t, err)
				for range 3 {
					g.step()
				}
			}
			select {
			case i := <-a.lost:
				a.mu.Lock()
				reasons := slices.Clone(a.reasons)
				a.mu.Unlock()
				t.Fatalf("shard %d lost to a write that kept its holder: %v", i, reasons)
			default:
			}
			assert.Equal(t, []string{"a"}, g.holders())
			require.NoError(t, a.e.Guard(0)())
			l, ok := g.server.Lease(testNamespace, name)
			require.True(t, ok)
			assert.Equal(t, "2", l.Annotations["example.com/touched"], "the renewals kept the foreign write")

			// A foreign write of the record is another matter: a shorter
			// duration lets the others take the Lease sooner than this
			// term counts on, so the holder gives it up at its next renewal.
			l.Spec.LeaseDurationSeconds = ptr.To(int32(1))
			_, err := admin.Update(context.Background(), l, metav1.UpdateOptions{})
			require.NoError(t, err)
			g.step()
			select {
			case i := <-a.lost:
				assert.Equal(t, 0, i)
			case <-time.After(wait):
				t.Fatal("a changed duration did not lose the shard")
			}
		})
	}
}

// TestAnAnnotatedLeaseIsStillReleased: a holder that stops after someone
// annotated its Lease releases it all the same, so that a standby takes it
// at once rather than a lease duration later.
func TestAnAnnotatedLeaseIsStillReleased(t *testing.T) {
	g := newSingleGroup(t)
	g.start("a")
	g.settle("a alone")
	admin := g.admin()
	l, err := admin.Get(context.Background(), testGroup, metav1.GetOptions{})
	require.NoError(t, err)
	l.Annotations = map[string]string{"example.com/touched": "yes"}
	_, err = admin.Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	g.stop("a")
	l = g.singleLease()
	assert.Empty(t, *l.Spec.HolderIdentity, "not released")
	assert.Equal(t, "yes", l.Annotations["example.com/touched"])
}

// TestADeletedLeaseIsCreatedAgainByItsHolder: someone deletes the held
// Lease (kubectl delete lease). The holder's next renewal creates it again,
// in the same term (holder, acquire time, transitions), as client-go's
// elector does: no failover, nothing lost. The standby, which saw the
// deletion, does not take it meanwhile (it would wait LeaseDuration from
// the deletion: TestALeaseDeletedWhileItsHolderIsCutOff). It used to be
// held by nobody, for ever: every campaign's read found nothing to update.
func TestADeletedLeaseIsCreatedAgainByItsHolder(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			a, _, name := g.holderAndStandby()
			before, ok := g.server.Lease(testNamespace, name)
			require.True(t, ok)
			admin := g.admin()
			require.NoError(t, admin.Delete(context.Background(), name, metav1.DeleteOptions{}))
			periods := 0
			for g.server.Holder(testNamespace, name) == "" {
				require.Less(t, periods, 4, "the holder did not create the deleted Lease again")
				g.step()
				periods++
			}
			after, _ := g.server.Lease(testNamespace, name)
			assert.Equal(t, "a", *after.Spec.HolderIdentity)
			assert.Equal(t, *before.Spec.LeaseTransitions, *after.Spec.LeaseTransitions, "a new term")
			assert.True(t, before.Spec.AcquireTime.Equal(after.Spec.AcquireTime), "a new term")
			assert.Equal(t, before.Labels, after.Labels)
			for range 3 {
				g.step()
			}
			select {
			case i := <-a.lost:
				t.Fatalf("a lost shard %d to the deletion", i)
			default:
			}
			require.NoError(t, a.e.Guard(0)())
			assert.Equal(t, []string{"a"}, g.holders())
			t.Logf("created again after %d retry periods", periods)
		})
	}
}

// TestAStartingReplicaCampaignsOnlyAfterItsFirstList: a replica whose
// watch has not delivered its first list has not seen the held Lease, and
// a Lease not seen is not a Lease that does not exist. Deleted meanwhile,
// the Lease would be created by that replica's campaign beside a holder
// that still runs, until the holder's next renewal found it out. It is
// deleted here before the standby starts, with the standby's list held:
// the holder creates it again at its renewal, and the standby, once it has
// listed, stands by.
func TestAStartingReplicaCampaignsOnlyAfterItsFirstList(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			a, name := g.holderAlone()
			admin := g.admin()
			require.NoError(t, admin.Delete(context.Background(), name, metav1.DeleteOptions{}))
			gate := make(chan struct{})
			g.client = func(c *leasetest.Client) kubernetes.Interface { return heldLists{Client: c, gate: gate} }
			b := g.start("b")
			g.step() // a renews (creating the Lease again); b ticks, its member Lease written
			assert.Equal(t, "a", g.server.Holder(testNamespace, name), "the deleted Lease was not created again by its holder")
			require.NoError(t, a.e.Guard(0)())
			assert.False(t, b.e.Status()[0].Held)
			close(gate)
			g.settle("b listed")
			g.step()
			assert.Equal(t, []string{"a"}, g.holders())
			select {
			case i := <-a.lost:
				t.Fatalf("a lost shard %d", i)
			default:
			}
		})
	}
}

// heldLists is a clientset whose Lease lists wait until gate is closed
// (nil: they do not), or until their context ends: a watch that has not
// delivered its first list. The first hang lists (and the first
// hangWatches watches) are never answered at all: they return only when
// their context ends, and are counted in hung (hungWatches).
type heldLists struct {
	*leasetest.Client
	gate                     <-chan struct{}
	hang, hung               *atomic.Int32
	hangWatches, hungWatches *atomic.Int32
}

func (c heldLists) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return heldListsV1{CoordinationV1Interface: c.Client.CoordinationV1(), c: c}
}

type heldListsV1 struct {
	coordinationv1client.CoordinationV1Interface
	c heldLists
}

func (c heldListsV1) Leases(namespace string) coordinationv1client.LeaseInterface {
	return heldListsLeases{LeaseInterface: c.CoordinationV1Interface.Leases(namespace), c: c.c}
}

type heldListsLeases struct {
	coordinationv1client.LeaseInterface
	c heldLists
}

func (l heldListsLeases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if l.c.hang != nil && l.c.hang.Add(-1) >= 0 {
		<-ctx.Done()
		l.c.hung.Add(1)
		return nil, ctx.Err()
	}
	if l.c.gate != nil {
		select {
		case <-l.c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.LeaseInterface.List(ctx, opts)
}

func (l heldListsLeases) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if l.c.hangWatches != nil && l.c.hangWatches.Add(-1) >= 0 {
		<-ctx.Done()
		l.c.hungWatches.Add(1)
		return nil, ctx.Err()
	}
	return l.LeaseInterface.Watch(ctx, opts)
}

// TestAListThatNeverAnswersIsTriedAgain: the API server takes a starting
// replica's first list and never answers it. The list is given up after
// RenewDeadline, as a write is, and made again at the next retry: the
// replica, which campaigns only once it has listed, leads then, instead of
// waiting for an answer that never comes.
func TestAListThatNeverAnswersIsTriedAgain(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			var hang, hung atomic.Int32
			hang.Store(1)
			g.client = func(c *leasetest.Client) kubernetes.Interface { return heldLists{Client: c, hang: &hang, hung: &hung} }
			a := g.start("a")
			require.Eventually(t, func() bool { return hung.Load() == 1 }, wait, poll, "the first list was not given up")
			require.Eventually(t, func() bool { return a.e.watchWaits.Load() == 1 }, wait, poll, "the watch did not wait for its retry")
			g.step() // the retry: a lists again, and campaigns once it has
			require.Eventually(t, func() bool { return g.server.Holder(testNamespace, g.lease0()) == "a" }, wait, poll,
				"a did not lead once it could list")
			// The server shows a's write before a has taken its answer:
			// wait until a's Status agrees, as settle does, then ask the
			// guard.
			g.settle("a leading")
			require.NoError(t, a.e.Guard(0)())
		})
	}
}

// TestAWatchThatNeverOpensIsTriedAgain: the API server takes a standby's
// first watch request and never answers it. Until the call returns, the
// watch goroutine neither forwards events nor serves the polls asked for
// a silent watch: the replica would be blind to every later write. The
// opening is given up after RenewDeadline and the list and watch made
// again at the next retry, and the standby is shown the holder's renewals.
func TestAWatchThatNeverOpensIsTriedAgain(t *testing.T) {
	g := newOneLeaseGroup(t, false)
	g.start("a")
	g.settle("a alone")
	var hang, hung atomic.Int32
	hang.Store(1)
	g.client = func(c *leasetest.Client) kubernetes.Interface {
		return heldLists{Client: c, hangWatches: &hang, hungWatches: &hung}
	}
	b := g.start("b")
	require.Eventually(t, func() bool { return hung.Load() == 1 }, wait, poll, "the first watch was not given up")
	require.Eventually(t, func() bool { return b.e.watchWaits.Load() == 1 }, wait, poll, "the watch did not wait for its retry")
	for range 3 {
		g.step() // a renews; b lists and watches again
	}
	latest := g.server.LatestVersion()
	require.Eventually(t, func() bool { return b.e.shown.Load() >= latest }, wait, poll,
		"b was not shown version %d (shown %d)", latest, b.e.shown.Load())
	assert.Equal(t, []string{"a"}, g.holders())
}

// TestALeaseDeletedWhileItsHolderIsCutOff: the holder cannot hear of the
// deletion (partitioned), so it runs the shard until its renewals have
// failed for RenewDeadline. The standby, which sees the deletion at once,
// must not create the Lease again before that: it waits LeaseDuration
// from the deletion (observed.gone), and the journal checks that the shard
// never runs on both.
func TestALeaseDeletedWhileItsHolderIsCutOff(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			a, b, name := g.holderAndStandby()
			a.client.Partition(true)
			admin := g.admin()
			require.NoError(t, admin.Delete(context.Background(), name, metav1.DeleteOptions{}))
			periods := 0
			for g.server.Holder(testNamespace, name) == "" {
				require.Less(t, periods, 4*int(leaseDuration/retryPeriod), "nobody created the Lease again")
				g.step()
				periods++
			}
			assert.Equal(t, "b", g.server.Holder(testNamespace, name))
			assert.GreaterOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration, "created again before a holder that did not hear of the deletion had to give it up")
			select {
			case <-a.lost:
			default:
				t.Fatal("a, cut off, did not give the shard up")
			}
			require.Error(t, a.e.Guard(0)())
			require.NoError(t, b.e.Guard(0)())
			t.Logf("created again after %d retry periods", periods)
		})
	}
}

// TestADeletedMemberLeaseIsCreatedAgain: a replica whose member Lease is
// deleted creates it again at its next renewal and keeps its share; it
// used to update the deleted Lease for ever, and to drop out of the
// others' assignment once they had forgotten it.
func TestADeletedMemberLeaseIsCreatedAgain(t *testing.T) {
	g := newGroup(t, 4)
	g.start("a")
	g.start("b")
	g.settleStepping("a and b", 4*int(leaseDuration/retryPeriod))
	admin := g.admin()
	member := MemberLease(testGroup, "b")
	require.NoError(t, admin.Delete(context.Background(), member, metav1.DeleteOptions{}))
	for range 2 * int(leaseDuration/retryPeriod) {
		g.step()
	}
	require.Equal(t, "b", g.server.Holder(testNamespace, member), "b's member Lease was not created again")
	g.settle("a and b, after the deletion")
}

// TestEditsOfADeadHoldersLeaseDoNotKeepItAlive: the holder dies (SIGKILL:
// nothing released) and something keeps editing the Lease's metadata (a
// GitOps tool reapplying its labels), more often than LeaseDuration. Only
// a renewal proves the holder alive: as client-go's elector judges expiry
// on the record, the standby takes the Lease once it has expired since the
// last renewal it saw, however many edits came since. It used to restart
// its clock at each edit, and never took the Lease.
func TestEditsOfADeadHoldersLeaseDoNotKeepItAlive(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			g := newOneLeaseGroup(t, single)
			_, _, name := g.holderAndStandby()
			g.crash("a")
			admin := g.admin()
			periods := 0
			for g.server.Holder(testNamespace, name) != "b" {
				require.Less(t, periods, 3*int(leaseDuration/retryPeriod), "b never took the dead holder's Lease")
				require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
					l, err := admin.Get(context.Background(), name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					if l.Labels == nil {
						l.Labels = map[string]string{}
					}
					l.Labels["example.com/synced"] = fmt.Sprint(periods)
					_, err = admin.Update(context.Background(), l, metav1.UpdateOptions{})
					return err
				}))
				g.step()
				periods++
			}
			assert.LessOrEqual(t, time.Duration(periods)*retryPeriod, leaseDuration+3*retryPeriod)
			t.Logf("taken after %d retry periods", periods)
		})
	}
}

// TestAnEditThatDropsTheGroupLabelIsUndone: an edit removes the label the
// group's watches select by from a held shard Lease. The holder's next
// renewal, refused, reads the Lease back and writes the label again, so
// that the other replicas go on seeing the Lease (and could take it once
// its holder died) instead of losing it from their lists.
func TestAnEditThatDropsTheGroupLabelIsUndone(t *testing.T) {
	g := newGroup(t, 1)
	a := g.start("a")
	g.settle("a alone")
	name := ShardLease(testGroup, 0)
	admin := g.admin()
	l, err := admin.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	delete(l.Labels, LabelGroup)
	l.Labels["example.com/kept"] = "yes"
	_, err = admin.Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	for range 3 {
		g.step()
	}
	l, ok := g.server.Lease(testNamespace, name)
	require.True(t, ok)
	assert.Equal(t, testGroup, l.Labels[LabelGroup], "the group label was not written back")
	assert.Equal(t, "yes", l.Labels["example.com/kept"])
	assert.Equal(t, "a", *l.Spec.HolderIdentity)
	select {
	case i := <-a.lost:
		t.Fatalf("a lost shard %d to the edit", i)
	default:
	}
}

// TestALeaseOutOfSightIsReadWhenItsCreateIsRefused: the holder dies, and an
// edit makes its Lease invisible to the standby's watch (deleted, then made
// again without the group label: the standby saw the deletion and nothing
// since). Once the tombstone has expired the standby creates the Lease and
// is refused (AlreadyExists); it now reads what is there and takes it once
// that too has expired, where it used to create it again at every tick, for
// ever.
func TestALeaseOutOfSightIsReadWhenItsCreateIsRefused(t *testing.T) {
	g := newGroup(t, 1)
	_, _, name := g.holderAndStandby()
	last, ok := g.server.Lease(testNamespace, name)
	require.True(t, ok)
	g.crash("a")
	admin := g.admin()
	require.NoError(t, admin.Delete(context.Background(), name, metav1.DeleteOptions{}))
	hidden := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace,
		Labels: map[string]string{"example.com/kept": "yes"}}, Spec: *last.Spec.DeepCopy()}
	_, err := admin.Create(context.Background(), hidden, metav1.CreateOptions{})
	require.NoError(t, err)
	periods := 0
	for g.server.Holder(testNamespace, name) != "b" {
		require.Less(t, periods, 5*int(leaseDuration/retryPeriod), "b never took the Lease out of its sight")
		g.step()
		periods++
	}
	t.Logf("taken after %d retry periods", periods)
}

// staleGet is a store whose next Get of one Lease, once armed, runs
// before the read and after it hooks that write it meanwhile, so that
// its answer comes to the loop after the watch has shown newer versions.
type staleGet struct {
	leaseStore
	name          string
	armed         atomic.Bool
	before, after func()
}

func (s *staleGet) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	if name != s.name || !s.armed.CompareAndSwap(true, false) {
		return s.leaseStore.Get(ctx, name)
	}
	s.before()
	l, err := s.leaseStore.Get(ctx, name)
	s.after()
	return l, err
}

// TestACampaignsStaleReadDoesNotHideALaterRelease: a campaign refused
// because another took the Lease first comes back with the read that
// refused it; the watch may have shown newer versions by then (the other
// released it again). That read must not stand for the Lease: taken as the
// last version, it showed a live holder until that holder's lease expired,
// and the shard went unheld although free (a start that did not settle in
// TestElectorBalanceJoinLeaveCrash, about 1 run in 1,000 under load; the
// same in TestElectorPartitionedHolderFencesFirst with more reads).
func TestACampaignsStaleReadDoesNotHideALaterRelease(t *testing.T) {
	g := newGroup(t, 2)
	g.start("other")
	g.settle("other alone")
	g.crash("other") // its Leases stay, held, until they expire

	name := ShardLease(testGroup, 0)
	var hook *staleGet
	var a *replica
	g.wrap = func(st leaseStore) leaseStore {
		hook = &staleGet{leaseStore: st, name: name}
		// A thief takes it before the campaign's read and gives it back
		// after; the replica's watch shows both before the answer.
		hook.before = func() {
			require.NoError(t, g.server.Steal(testNamespace, name, "thief", leaseDuration))
		}
		hook.after = func() {
			leases := g.server.Client("thief").CoordinationV1().Leases(testNamespace)
			l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(t, err)
			empty := ""
			l.Spec.HolderIdentity = &empty
			_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
			require.NoError(t, err)
			// Holder was "other", then "thief": "" is the release, seen.
			require.Eventually(t, func() bool { return a.e.Status()[0].Holder == "" }, wait, poll,
				"the watch did not show the release")
		}
		return hook
	}
	a = g.start("a")
	hook.armed.Store(true)
	// The thief's first version is read by the campaign that follows the
	// expiry of other's Lease; its answer comes after the release.
	for range 4 * int(leaseDuration/retryPeriod) {
		if !hook.armed.Load() {
			break
		}
		g.step()
	}
	require.False(t, hook.armed.Load(), "no campaign read the Lease")
	// No more steps: the release is free now, and it is seen.
	require.Eventually(t, func() bool { return g.server.Holder(testNamespace, name) == "a" }, wait, poll,
		"the shard freed during the campaign was not taken: holder %q", g.server.Holder(testNamespace, name))
}
