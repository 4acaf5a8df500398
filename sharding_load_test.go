package controllermanager_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// Sharded leadership against a slow API server, through the public API:
// Lease writes that take 90 ms, close to the 100 ms retry period of these
// tests (as 4.5 s would be at the default 5 s). A replica must keep every
// shard it can renew, whatever else it is doing (campaigning for a crashed
// peer's shards, or for all of them at start), and a replica that is
// shutting down must take nothing.

// slowWrites is the Lease write latency of these tests.
const slowWrites = 90 * time.Millisecond

// loadReplica is one manager of the tests below, with its controllers
// (AddSharded "ctl": "ctl-<i>" on shard i) and events.
type loadReplica struct {
	id     string
	m      *cm.ControllerManager
	client *leasetest.Client
	writes *timedWrites // the round trips of its Lease writes
	events *elEvents

	mu    sync.Mutex
	ctrls map[string]*elController
}

// startLoadReplica starts a replica of shards shards whose Lease writes
// take slowWrites. Its Leases have the leasetest Client to themselves
// (WithLeaderElectionClient), as leasetest's package doc asks with many
// shards: the manager's Kubernetes Events go through a clientset of their
// own. On one Client the fake serves one call at a time, and under -race
// on a busy machine the 32 ShardAcquired Events held that lock for 0.4 to
// 0.5 s while every renewal waited behind them (82% of the wait on it, in
// a mutex profile), until shards lapsed with their renewals in flight and
// each loss's Event held the next round up: a queue no API server has
// (its Events and Leases are not served one at a time) and none a manager
// given its own election client has (its rate limiter is the renewals').
func startLoadReplica(t *testing.T, srv *leasetest.Server, id string, shards int, activity *elActivity, shutdown func(context.Context)) *loadReplica {
	t.Helper()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = int32(shards)
	r := &loadReplica{id: id, client: srv.Client(id), writes: &timedWrites{}, ctrls: map[string]*elController{}}
	r.client.SetLatency(leasetest.Latency{Verbs: map[string]time.Duration{"create": slowWrites, "update": slowWrites}})
	m, err := cm.NewControllerManager(cm.NewContext(fake.NewClientset()), cm.ControllerManagerConfigSpec{LeaderElection: spec}, "",
		cm.WithIdentity(id), cm.WithLeaderElectionClient(timedClient{r.client, r.writes}), elQuiet)
	require.NoError(t, err)
	r.m = m
	r.events = (&elEvents{}).subscribe(m)
	m.AddSharded("ctl", func(s cm.Shard) cm.Controller {
		c := &elController{replica: id, name: fmt.Sprintf("ctl-%d", s.Index), activity: activity}
		c.set(nil, shutdown)
		r.mu.Lock()
		r.ctrls[c.name] = c
		r.mu.Unlock()
		return c
	})
	t.Cleanup(func() {
		r.client.Partition(false)
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	go func() { _ = m.Start(context.Background(), 0) }()
	return r
}

// held returns the shards r holds, from its Status.
func (r *loadReplica) held(t *testing.T) []int {
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	st, err := r.m.Status(ctx)
	if err != nil {
		return nil // stopped
	}
	var held []int
	for _, s := range st.Shards {
		if s.Held {
			held = append(held, s.Index)
		}
	}
	return held
}

// assertKept asserts that nothing held was lost (lost and fenced are the
// counts to compare with want), unless r could not renew, for a stated,
// measured reason:
//   - the test process stalled for half the renew deadline (the pause
//     watch), or r sent no Lease write at all for that long (its longest
//     gap between writes the server received since since: under the race
//     detector beside busy loops and the other sharded tests, a replica's
//     renewals fell to a fifth of their schedule and then stopped for 1.3 s
//     while the pause watch, one goroutine's timer, saw 150 ms). A replica
//     that does not run cannot renew, which no elector can help (the
//     paused-process limit of docs/leader-election.md);
//   - one of r's Lease writes sent since since took over half of
//     RenewDeadline − 2 × RetryPeriod to be answered (its longest round
//     trip, the 90 ms latency included). A shard renewed at the first tick
//     after each answer is lost only when two round trips, the wait for a
//     tick between them (up to a RetryPeriod, and a tick late under load,
//     the other RetryPeriod) exceed the renew deadline. The fake serves a
//     Client's calls one at a time, so beside the other slow-API-server
//     tests under -race r's 33 writes a round wait on each other: a slow
//     server, not an elector's choice (a loss with a slowest write of
//     442 ms, under the 450 ms a bound without the late tick gave, failed
//     1 run in 10).
//
// An elector that lets a held shard lapse while it writes others
// (campaigns) promptly is not excused.
func assertKept(t *testing.T, activity *elActivity, srv *leasetest.Server, r *loadReplica, since time.Time, what string, wantLost, lost, wantFenced, fenced int) {
	t.Helper()
	pause := activity.pauses.Longest()
	gap := writeGap(srv, r, since)
	trip := r.writes.longest(since)
	if (lost != wantLost || fenced != wantFenced) && (max(pause, gap) > elRenewDeadline/2 || trip > (elRenewDeadline-2*elRetryPeriod)/2) {
		t.Logf("%s: %d shards lost, %d controllers fenced, excused: the test process stalled for %s, %s sent no Lease write for %s, its slowest Lease write took %s",
			what, lost-wantLost, fenced-wantFenced, pause, r.id, gap, trip)
		return
	}
	assert.Equal(t, wantLost, lost, "%s: shards lost (longest process stall %s, longest gap between %s's writes %s, slowest write %s)", what, pause, r.id, gap, trip)
	assert.Equal(t, wantFenced, fenced, "%s: controllers fenced (longest process stall %s, longest gap between %s's writes %s, slowest write %s)", what, pause, r.id, gap, trip)
}

// keptFor polls cond for d and logs the first time it no longer holds. It
// does not fail: whether a lapse is a fault is assertKept's to judge, which
// excuses a process that did not run (elConsistently failed at once, and
// did in a loaded run of the whole package).
func keptFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if after, lapsed := lapse(d, cond); lapsed {
		t.Logf("no longer true after %s: %s", after.Round(time.Millisecond), what)
	}
}

// shutdowns is how many times r's controllers have been shut down.
func (r *loadReplica) shutdowns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.ctrls {
		_, s := c.counts()
		n += s
	}
	return n
}

// A lone replica takes every shard at start, with 90 ms writes, and loses
// none of them afterwards: its campaigns go out side by side and never
// hold its renewals up.
func TestSlowAPIServerLoneReplicaHoldsEveryShard(t *testing.T) {
	t.Parallel()
	const shards = 32
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := startLoadReplica(t, srv, "a", shards, activity, nil)
	elEventually(t, "a holds every shard", func() bool { return len(a.held(t)) == shards })
	began := time.Now()
	// Two lease durations of renewals at 90 ms a write.
	keptFor(t, 2*elLeaseDuration, "a keeps every shard", func() bool { return len(a.held(t)) == shards })
	assertKept(t, activity, srv, a, began, "a replica alone, with every write answered", 0, a.events.count(cm.ShardLost), 0, a.shutdowns())
	activity.assertNoOverlap(t)
}

// A peer's crash costs the survivor none of its own shards: with 90 ms
// writes, it takes the crashed peer's 16 shards while it renews its own 16,
// within LeaseDuration + 2 × RetryPeriod of the last renewal the peer made
// (measured here from the cut, a little later), plus the campaigns' own
// round trips.
func TestSlowAPIServerCrashedPeerCostsTheSurvivorNothing(t *testing.T) {
	t.Parallel()
	const shards = 32
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := startLoadReplica(t, srv, "a", shards, activity, nil)
	elEventually(t, "a holds every shard", func() bool { return len(a.held(t)) == shards })
	b := startLoadReplica(t, srv, "b", shards, activity, nil)
	// 16 hand-overs at 90 ms a write: on a loaded machine, under the race
	// detector, more than elWait.
	elEventuallyWithin(t, 3*elWait, "a and b hold 16 each", func() bool { return len(a.held(t)) == shards/2 && len(b.held(t)) == shards/2 })
	own := a.held(t)
	lostBefore, shutdownsBefore := a.events.count(cm.ShardLost), a.shutdowns()
	cut := time.Now()
	b.client.Partition(true) // as a SIGKILL leaves it: its Leases are not released
	elEventually(t, "a holds every shard after b's crash", func() bool { return len(a.held(t)) == shards })
	took := time.Since(cut)
	t.Logf("every shard held again %s after the cut (lease %s + 2 × retry %s)", took.Round(time.Millisecond), elLeaseDuration, elRetryPeriod)
	keptFor(t, elLeaseDuration, "a keeps every shard", func() bool { return len(a.held(t)) == shards })
	assertKept(t, activity, srv, a, cut.Add(-elLeaseDuration), "a, while it took b's shards", lostBefore, a.events.count(cm.ShardLost), shutdownsBefore, a.shutdowns())
	if t.Failed() {
		logLosses(t, a)
	}
	// After a loss assertKept excused (the process did not run), a takes
	// its shards back: its own must be among them then.
	elEventually(t, "a holds every shard", func() bool { return len(a.held(t)) == shards })
	held := a.held(t)
	for _, i := range own {
		assert.True(t, slices.Contains(held, i), "a's own shard %d", i)
	}
	activity.assertNoOverlapPerChild(t)
}

// A replica that is shutting down takes no shard. b's controllers hang in
// Shutdown, and b.ShutdownAndWait gives up after 200 ms with b still
// stopping; then a leaves cleanly. a's shard goes to c, which has room,
// not to b; b's own shard stays with b (its controller still runs) and
// goes to c once b's Shutdown returns.
func TestAShuttingDownReplicaTakesNoShard(t *testing.T) {
	t.Parallel()
	const shards = 3
	srv, activity := leasetest.NewServer(), newElActivity(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	a := startLoadReplica(t, srv, "a", shards, activity, nil)
	elEventually(t, "a holds every shard", func() bool { return len(a.held(t)) == shards })
	b := startLoadReplica(t, srv, "b", shards, activity, func(context.Context) { <-release }) // ignores its context too
	c := startLoadReplica(t, srv, "c", shards, activity, nil)
	elEventually(t, "one shard each", func() bool { return len(a.held(t)) == 1 && len(b.held(t)) == 1 && len(c.held(t)) == 1 })
	aShard, bShard := a.held(t)[0], b.held(t)[0]

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	b.m.ShutdownAndWait(ctx) // gives up: b's controller hangs in Shutdown
	cancel()
	acquiredByB := b.events.count(cm.ShardAcquired)

	ctx, cancel = context.WithTimeout(context.Background(), elWait)
	a.m.ShutdownAndWait(ctx)
	cancel()
	require.NoError(t, a.m.Err())
	elEventually(t, "c takes a's shard", func() bool { return slices.Contains(c.held(t), aShard) })
	assert.Equal(t, acquiredByB, b.events.count(cm.ShardAcquired), "shards b acquired while shutting down")
	assert.Equal(t, []int{bShard}, b.held(t), "b holds its own shard while its controller is stopping, and no other")

	releaseOnce.Do(func() { close(release) })
	elEventually(t, "c holds every shard once b has stopped", func() bool { return len(c.held(t)) == shards })
	<-b.m.Done()
	assert.Equal(t, acquiredByB, b.events.count(cm.ShardAcquired), "shards b acquired while shutting down")
	activity.assertNoOverlapPerChild(t)
}

// logLosses logs each loss r reported, with its reason.
func logLosses(t *testing.T, r *loadReplica) {
	t.Helper()
	for _, e := range r.events.all() {
		if e.Type == cm.ShardLost {
			t.Logf("%s lost at %s: %v", r.id, e.Time.Format("05.000"), e.Err)
		}
	}
}

// writeGap is the longest time since since, up to now, in which the server
// received no Lease write from r.
func writeGap(srv *leasetest.Server, r *loadReplica, since time.Time) time.Duration {
	last, gap := since, time.Duration(0)
	for _, w := range srv.History() {
		if w.Client != r.id || w.Time.Before(since) {
			continue
		}
		gap = max(gap, w.Time.Sub(last))
		last = w.Time
	}
	return max(gap, time.Since(last))
}

// timedWrites records the round trips of a replica's Lease writes, as its
// elector saw them: from the call to its answer.
type timedWrites struct {
	mu    sync.Mutex
	trips []timedWrite
}

type timedWrite struct {
	sent time.Time
	took time.Duration
}

// longest is the longest round trip of the writes sent since since.
func (w *timedWrites) longest(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, t := range w.trips {
		if !t.sent.Before(since) {
			d = max(d, t.took)
		}
	}
	return d
}

func (w *timedWrites) time(sent time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trips = append(w.trips, timedWrite{sent: sent, took: time.Since(sent)})
}

// timedClient is a leasetest Client whose Lease writes are timed.
type timedClient struct {
	*leasetest.Client
	writes *timedWrites
}

func (c timedClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return timedCoordination{c.Client.CoordinationV1(), c.writes}
}

type timedCoordination struct {
	coordinationv1client.CoordinationV1Interface
	writes *timedWrites
}

func (c timedCoordination) Leases(namespace string) coordinationv1client.LeaseInterface {
	return timedLeases{c.CoordinationV1Interface.Leases(namespace), c.writes}
}

type timedLeases struct {
	coordinationv1client.LeaseInterface
	writes *timedWrites
}

func (l timedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	defer l.writes.time(time.Now())
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l timedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	defer l.writes.time(time.Now())
	return l.LeaseInterface.Update(ctx, lease, opts)
}
