package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
)

// cutClient fails its Lease writes once cut (a network that drops the
// replica's writes; its watch goes on).
type cutClient struct {
	kubernetes.Interface
	cut *atomic.Bool
}

func (c cutClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return cutCoord{CoordinationV1Interface: c.Interface.CoordinationV1(), cut: c.cut}
}

type cutCoord struct {
	coordinationv1client.CoordinationV1Interface
	cut *atomic.Bool
}

func (c cutCoord) Leases(ns string) coordinationv1client.LeaseInterface {
	return cutLeases{LeaseInterface: c.CoordinationV1Interface.Leases(ns), cut: c.cut}
}

type cutLeases struct {
	coordinationv1client.LeaseInterface
	cut *atomic.Bool
}

var errCut = errors.New("attack: writes cut")

func (l cutLeases) Create(ctx context.Context, x *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.Create(ctx, x, o)
}
func (l cutLeases) Update(ctx context.Context, x *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.cut.Load() {
		return nil, errCut
	}
	return l.LeaseInterface.Update(ctx, x, o)
}

// A sharded replica a, on client-go's fake clientset answering every
// Lease call in 100 ms, hands shards over to b as b joins; at the moment
// the hand-over's first Shutdown runs, a's Lease writes are cut and a is
// shut down. No shard's controller runs on both; a's ShutdownAndWait
// returns within its context with one answer (nil or ErrLost) that Status
// agrees with; b ends holding every shard.
func TestAttackShutdownMeetsHandoverAndCut(t *testing.T) {
	t.Parallel() // waits on the real clock (lease expiries) most of its time
	for _, backend := range []string{"NewClientset-100ms", "NewSimpleClientset"} {
		t.Run(backend, func(t *testing.T) {
			const shards = 4
			srv, activity := newFakeServer(backend), newElActivity(t)
			var cut, armed atomic.Bool
			var handover sync.Once
			shutdownDone := make(chan struct{})
			mk := func(id string, client kubernetes.Interface, hook func()) *fakeReplica {
				return startShardedReplica(t, id, client, shards, activity, hook)
			}
			var a *cm.ControllerManager
			var shutdownErr atomic.Value
			ra := mk("a", cutClient{Interface: srv.clientFor("a"), cut: &cut}, func() {
				if !armed.Load() {
					return // a fence of a's own settling (a starved renewal), not the hand-over's
				}
				handover.Do(func() {
					cut.Store(true)
					go func() {
						defer close(shutdownDone)
						ctx, cancel := context.WithTimeout(context.Background(), 3*handoverLeaseDuration)
						defer cancel()
						a.ShutdownAndWait(ctx)
						shutdownErr.Store(fmt.Sprint(ctx.Err()))
					}()
				})
			})
			a = ra.m
			fakeSettle(t, "a holds everything", []*fakeReplica{ra}, func() bool { return shardsHeld(a) == shards })
			armed.Store(true)
			rb := mk("b", srv.clientFor("b"), nil)
			b := rb.m
			select {
			case <-shutdownDone:
			case <-time.After(3*handoverLeaseDuration + elWait):
				t.Fatal("a's ShutdownAndWait did not return")
			}
			require.Equal(t, "<nil>", shutdownErr.Load(), "ShutdownAndWait ran out its context")
			<-a.Done()
			err := a.Err()
			if err != nil && !errors.Is(err, lease.ErrLost) {
				t.Fatalf("a.Err: %v", err)
			}
			st, serr := a.Status(context.Background())
			if serr == nil && fmt.Sprint(st.Err) != fmt.Sprint(err) {
				t.Fatalf("Status.Err %v, Err %v", st.Err, err)
			}
			require.Error(t, a.LeaseGuard())
			for i := 0; i < shards; i++ {
				require.Error(t, a.ShardLeaseGuard(i), "a's guard of shard %d", i)
			}
			fakeSettleWithin(t, 3*handoverLeaseDuration+elWait, "b holds everything", []*fakeReplica{rb}, func() bool { return shardsHeld(b) == shards })
			noShardOverlap(t, activity)
		})
	}
}

// The hand-over's first Shutdown hangs (ignores its context) and a is shut
// down meanwhile with a short context: ShutdownAndWait returns at its
// context with an UnstoppedError in Err; the hung shard is never run by b
// while a's Shutdown has not returned; once it returns, a stops and b
// takes every shard.
func TestAttackShutdownMeetsHungHandover(t *testing.T) {
	t.Parallel() // waits on the real clock (lease expiries) most of its time
	const shards = 4
	srv, activity := newFakeServer("NewClientset-100ms"), newElActivity(t)
	var hung sync.Once
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	returned := make(chan struct{})
	var armed atomic.Bool
	mk := func(id string, hook func()) *fakeReplica {
		return startShardedReplica(t, id, srv.clientFor(id), shards, activity, hook)
	}
	var a *cm.ControllerManager
	ra := mk("a", func() {
		if !armed.Load() {
			return // a fence of a's own settling (a starved renewal), not the hand-over's
		}
		first := false
		hung.Do(func() { first = true })
		if !first {
			return
		}
		go func() {
			defer close(returned)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			a.ShutdownAndWait(ctx)
		}()
		<-release // ignores its context
	})
	a, aev := ra.m, ra.events
	fakeSettle(t, "a holds everything", []*fakeReplica{ra}, func() bool { return shardsHeld(a) == shards })
	armed.Store(true)
	rb := mk("b", nil)
	b := rb.m
	select {
	case <-returned:
	case <-time.After(elWait):
		t.Fatal("ShutdownAndWait did not return at its context")
	}
	require.ErrorIs(t, a.Err(), cm.ErrUnstopped)
	select {
	case <-a.Done():
		t.Fatal("Done with a Shutdown still running")
	default:
	}
	// b takes what a released, never the hung shard: watch for a lease
	// duration and more. Unless a lost it to the machine (a starved
	// renewal, "not renewed"): a shard lost while its child's Shutdown
	// hangs cannot be fenced (the process must exit, docs/architecture.md),
	// and b takes it once it has expired.
	elConsistently(t, handoverLeaseDuration+time.Second, "b never runs beside a's hung Shutdown", func() bool {
		return noShardOverlapUnless(t, activity, func(x, y elSpan) bool { return lostToTheMachine(aev, x, y) })
	})
	releaseOnce.Do(func() { close(release) })
	select {
	case <-a.Done():
	case <-time.After(elWait):
		t.Fatal("a not Done once its Shutdown returned")
	}
	require.ErrorIs(t, a.Err(), cm.ErrUnstopped, "Err changed once stopped: %v", a.Err())
	fakeSettleWithin(t, 3*handoverLeaseDuration+elWait, "b holds everything", []*fakeReplica{rb}, func() bool { return shardsHeld(b) == shards })
	noShardOverlapUnless(t, activity, func(x, y elSpan) bool { return lostToTheMachine(aev, x, y) })
}

// lostToTheMachine reports whether, of two overlapping spans of one
// sharded child ("ctl-<i>"), the one on a began after a had lost shard i
// to a renewal the machine starved (isSetback's reasons), as its
// ShardLost says.
func lostToTheMachine(aev *elEvents, x, y elSpan) bool {
	if y.replica == "a" {
		x, y = y, x
	}
	var shard int
	if _, err := fmt.Sscanf(x.child, "ctl-%d", &shard); err != nil || x.replica != "a" {
		return false
	}
	aev.mu.Lock()
	defer aev.mu.Unlock()
	for _, ev := range aev.events {
		if ev.Type == cm.ShardLost && ev.Shard == shard && ev.Time.Before(y.from) && lostToTheMachineErr(ev.Err) {
			return true
		}
	}
	return false
}

// lostToTheMachineErr reports whether err, a ShardLost's, gives the
// machine's reason (isSetback's): a renewal not answered within the renew
// deadline, or answered after the term could prove the hold.
func lostToTheMachineErr(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "not renewed for ") ||
		strings.Contains(err.Error(), "renewal answered after the lease could have expired"))
}

// noShardOverlap fails if one child ran on two replicas at once.
func noShardOverlap(t *testing.T, a *elActivity) bool {
	t.Helper()
	return noShardOverlapUnless(t, a, func(elSpan, elSpan) bool { return false })
}

// noShardOverlapUnless is noShardOverlap, but an overlap excused says so
// in the log and passes.
func noShardOverlapUnless(t *testing.T, a *elActivity, excused func(x, y elSpan) bool) bool {
	t.Helper()
	ok := true
	a.overlaps(func(x, y elSpan) bool { return x.child == y.child }, func(x, y elSpan, xEnd, yEnd time.Time) {
		if excused(x, y) {
			t.Logf("excused (the shard was lost to the machine first): %s/%s from %s overlaps %s/%s from %s (pause %s)",
				x.replica, x.child, x.from.Format("05.000"), y.replica, y.child, y.from.Format("05.000"), a.pauses.Longest())
			return
		}
		ok = false
		t.Errorf("%s/%s active %s–%s overlaps %s/%s active %s–%s (pause %s)", x.replica, x.child, x.from.Format("05.000"),
			xEnd.Format("05.000"), y.replica, y.child, y.from.Format("05.000"), yEnd.Format("05.000"), a.pauses.Longest())
	})
	return ok
}

// Two replicas electing through client-go locks (WithLeaseLock, polled) on
// one plain fake clientset whose every Lease call takes 100 ms; the
// leader's writes are cut right after a renewal and it is shut down when
// its loss is published. Never two leaders' controllers at once; the
// leader's ShutdownAndWait returns with one answer; b takes over.
func TestAttackLeaseLockCutAndShutdown(t *testing.T) {
	t.Parallel() // waits on the real clock (lease expiries) most of its time
	for _, onLost := range []cm.LeaseLostAction{cm.LeaseLostExit, cm.LeaseLostReelect} {
		t.Run(string(onLost), func(t *testing.T) {
			f := newAttackFake()
			f.latency.Store(int64(100 * time.Millisecond))
			activity := newElActivity(t)
			var cut atomic.Bool
			mk := func(id string, client kubernetes.Interface) (*cm.ControllerManager, *elEvents) {
				lock, err := lease.NewLeaseLock(client, elNamespace, elLeaseName, id)
				require.NoError(t, err)
				m, err := cm.NewControllerManager(cm.NewContext(f), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(onLost)}, "",
					cm.WithIdentity(id), cm.WithLeaseLock(lock), elQuiet)
				require.NoError(t, err)
				m.Add(&elController{replica: id, name: "ctl", activity: activity})
				ev := (&elEvents{}).subscribe(m)
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), elWait)
					defer cancel()
					m.ShutdownAndWait(ctx)
				})
				go func() { _ = m.Start(context.Background(), 0) }()
				return m, ev
			}
			a, aev := mk("a", cutClient{Interface: f, cut: &cut})
			elEventually(t, "a leads", func() bool { return a.LeaseGuard() == nil })
			b, _ := mk("b", f)
			n := f.updates.Load()
			elEventually(t, "a renewal", func() bool { return f.updates.Load() > n })
			cut.Store(true)
			elEventuallyWithin(t, 3*elWait, "a loses", func() bool { return aev.losses() > 0 })
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			a.ShutdownAndWait(ctx)
			require.NoError(t, ctx.Err())
			<-a.Done()
			err := a.Err()
			if err != nil && !errors.Is(err, lease.ErrLost) {
				t.Fatalf("a.Err: %v", err)
			}
			require.Error(t, a.LeaseGuard())
			elEventuallyWithin(t, 3*elWait, "b leads", func() bool { return b.LeaseGuard() == nil && b.IsStarted() })
			activity.assertNoOverlap(t)
		})
	}
}

// These scenarios' lease and renew deadline (with elRetryPeriod): the
// fence budget fakeLeaseDuration gave them (6s − 3s − 100ms = 2.9s, a fence
// timeout of 2.32s), and a confirm window (rule 5 of "Read before write",
// docs/leader-election.md: a third of the renew deadline, at most 1s) of
// 1s, three times the 333ms of election_test.go's 1s deadline. On
// NewClientset-100ms a takeover's read and write spend 200ms in the fake's
// delay alone: beside three busy loops and other -race runs they took
// 370ms–990ms, so that with 333ms b's takeovers were left unconfirmed one
// lease duration after another, and the renewals of those it did confirm
// missed the 1s deadline ("not within 22s: b holds everything").
const (
	handoverLeaseDuration = 6 * time.Second
	handoverRenewDeadline = 3 * time.Second
)

// startShardedReplica starts (without waiting) a replica id electing
// shards Leases over client with Reelect, one elController per shard
// (ctl-<i>) recording into activity, its events and its elector's log
// recorded; hook, when set, runs in each controller's Shutdown. The test's
// cleanup shuts it down, and tells its log if the test failed.
func startShardedReplica(t *testing.T, id string, client kubernetes.Interface, shards int32, activity *elActivity, hook func()) *fakeReplica {
	t.Helper()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	spec.LeaseDuration.Duration = handoverLeaseDuration
	spec.RenewDeadline.Duration = handoverRenewDeadline
	r := &fakeReplica{id: id, events: &elEvents{}, done: make(chan error, 1), log: &logRecorder{}}
	m, err := cm.NewControllerManager(cm.NewContext(client), cm.ControllerManagerConfigSpec{LeaderElection: spec}, "",
		cm.WithIdentity(id), cm.WithLogger(slog.New(r.log)))
	require.NoError(t, err)
	r.m = m
	r.events.subscribe(m)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: %d setbacks (%d takeovers left unconfirmed), its log:\n%s", id, r.setbacks(), r.unconfirmed(), r.log.told())
		}
	})
	m.AddSharded("ctl", func(sh cm.Shard) cm.Controller {
		c := &elController{replica: id, name: fmt.Sprintf("ctl-%d", sh.Index), activity: activity}
		if hook != nil {
			c.shutdown = func(context.Context) { hook() }
		}
		return c
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	go func() { r.done <- m.Start(context.Background(), 0) }()
	return r
}

// shardsHeld is how many shards m's Status says it holds, -1 when Status
// does not answer.
func shardsHeld(m *cm.ControllerManager) int {
	st, err := m.Status(context.Background())
	if err != nil {
		return -1
	}
	n := 0
	for _, s := range st.Shards {
		if s.Held {
			n++
		}
	}
	return n
}
