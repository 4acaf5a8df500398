package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// raceChild is a controller that counts its live incarnations: one whose
// Run is entered before the Shutdown of the one before has been called is a
// second incarnation beside the first.
type raceChild struct {
	*testchild.Controller
	live, overlaps atomic.Int32
}

// raceStore is a store that counts its live incarnations as raceChild
// does, its Recover failing on every fourth call.
type raceStore struct {
	mu             sync.Mutex
	recovers       int
	live, overlaps atomic.Int32
}

func (s *raceStore) Name() string { return "s" }

func (s *raceStore) Recover(context.Context) error {
	if s.live.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	s.mu.Lock()
	s.recovers++
	n := s.recovers
	s.mu.Unlock()
	if n%4 == 0 {
		return fmt.Errorf("list %d failed", n)
	}
	return nil
}

func (s *raceStore) Shutdown(context.Context) { s.live.Add(-1) }

func (s *raceStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovers
}

func newRaceChild(name string, run func(n int) error) *raceChild {
	c := &raceChild{}
	c.Controller = testchild.NewController(name, testchild.Behavior{
		Run: func(ctx context.Context, n int) error {
			if c.live.Add(1) > 1 {
				c.overlaps.Add(1)
			}
			return run(n)
		},
		Shutdown: func(context.Context, int) { c.live.Add(-1) },
	})
	return c
}

// Lifecycle calls from four goroutines race on one group and its children
// (RestartChild, StopChild, StartChild of "g", "g/a", "g/b", "g/s") while
// "g/a" panics on every third Run, the group's store "g/s" fails every
// fourth Recover, and the group's AllForOne strategy restarts all three,
// store first; with election on, the Lease is stolen twice in the middle of the
// calls (Reelect: every child stops, and starts again once the thief's
// Lease has expired); with two shards, the group is shard 0's of
// AddShardedGroup and shard 0's Lease is stolen twice while shard 1's
// group runs on. Every call answers, with nil or an error that names a
// decision in progress or the lease; no child ever has two incarnations at
// once; once the calls have ended a StartChild of each brings both back;
// Restarts = runs-1; and after the shutdown nothing runs.
func TestAttackLifecycleCallsRaceOnOnePathWhileItPanics(t *testing.T) {
	t.Parallel()
	t.Run("no election", func(t *testing.T) { t.Parallel(); lifecycleRace(t, 0, false) })
	t.Run("reelect, lease stolen twice", func(t *testing.T) { t.Parallel(); lifecycleRace(t, 1, false) })
	t.Run("two shards, shard 0 stolen twice", func(t *testing.T) { t.Parallel(); lifecycleRace(t, 2, false) })
	t.Run("reelect on a fake clientset answering Lease calls in 100ms", func(t *testing.T) { t.Parallel(); lifecycleRace(t, 1, true) })
}

// lifecycleRace runs the attack with election off (shards 0), one Lease
// (1) or two shards (2), on leasetest's server or, with onFake, on
// client-go's fake clientset whose Lease calls take 100ms (a steal is
// another holder's Update of the Lease).
func lifecycleRace(t *testing.T, shards int32, onFake bool) {
	elected := shards > 0
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	var rngMu sync.Mutex

	a := newRaceChild("a", func(n int) error {
		if n%3 == 0 {
			panic(fmt.Sprintf("run %d", n))
		}
		return nil
	})
	b := newRaceChild("b", func(int) error { return nil })
	store := &raceStore{} // g's store, recovered first at every start of the group
	sup := &cm.SupervisionSpec{MaxRestarts: 100000, InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(2 * time.Millisecond)}
	var m *cm.ControllerManager
	var steal func(lease string) error
	if elected {
		var client kubernetes.Interface
		if onFake {
			f := fake.NewClientset()
			f.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				time.Sleep(100 * time.Millisecond) // latency of the API server (not synchronisation)
				return false, nil, nil
			})
			client = f
			steal = func(lease string) error {
				leases := f.CoordinationV1().Leases(elNamespace)
				l, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
				if err != nil {
					return err
				}
				now, thief, one := metav1.NowMicro(), "thief", int32(1)
				l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &thief, &now, &now, &one
				_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
				return err
			}
		} else {
			srv := leasetest.NewServer()
			client = srv.Client("a")
			steal = func(lease string) error { return srv.Steal(elNamespace, lease, "thief", 300*time.Millisecond) }
		}
		var err error
		spec := elSpec(cm.LeaseLostReelect)
		if shards > 1 {
			spec.Shards = shards
		}
		m, err = cm.NewControllerManager(cm.NewContext(client),
			cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: sup}, "", cm.WithIdentity("a"), elQuiet)
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			m.ShutdownAndWait(ctx)
		})
	} else {
		m = newManager(t, nil, sup)
	}
	gspec := cm.SupervisionSpec{Strategy: cm.AllForOne, MaxRestarts: 100000,
		InitialBackoff: gDuration(time.Millisecond), MaxBackoff: gDuration(2 * time.Millisecond)}
	g, lease := "g", elLeaseName
	if shards > 1 {
		g, lease = "g-0", elLeaseName+"-0"
		other := newRaceChild("c", func(int) error { return nil })
		m.AddShardedGroup("g", gspec, func(sh cm.Shard) []cm.Runnable {
			if sh.Index == 0 {
				return []cm.Runnable{cm.StoreChild(store), a, b}
			}
			return []cm.Runnable{other}
		})
		defer func() {
			require.Zero(t, other.overlaps.Load(), "g-1/c: two incarnations at once")
		}()
	} else {
		m.Add(cm.NewGroup("g", gspec, cm.StoreChild(store), a, b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*wait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))

	if shards > 1 {
		elEventually(t, "a holds shard 0", func() bool { return holdsShard(t, m, 0) })
	}

	// A decision in progress, or one that overtook the call: each says what
	// it was. Anything else (a timeout above all: a call that hangs) fails.
	// With election on, a call may also meet the manager Electing
	// (ErrNotRunning) or the Lease lost under its start (ErrShardNotHeld).
	allowed := []error{cm.ErrBusy, cm.ErrAlreadyRunning, cm.ErrStartInterrupted, cm.ErrChildStopped}
	if elected {
		allowed = append(allowed, cm.ErrNotRunning, cm.ErrShardNotHeld)
	}
	paths := []string{g, g + "/a", g + "/b", g + "/s"}
	var wg sync.WaitGroup
	errs := make(chan error, 4*40+2)
	var calls atomic.Int32
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				if elected && (calls.Add(1) == 40 || calls.Load() == 100) {
					// The Lease is stolen for a moment among the calls: a
					// thief's Lease of 300ms, which a's campaign waits out.
					if err := steal(lease); err != nil {
						errs <- fmt.Errorf("steal: %w", err)
					}
				}
				rngMu.Lock()
				op, path := rng.IntN(3), paths[rng.IntN(len(paths))]
				rngMu.Unlock()
				callCtx, cancel := context.WithTimeout(ctx, wait)
				var err error
				var name string
				switch op {
				case 0:
					name, err = "RestartChild", m.RestartChild(callCtx, path)
				case 1:
					name, err = "StopChild", m.StopChild(callCtx, path)
				default:
					name, err = "StartChild", m.StartChild(callCtx, path)
				}
				cancel()
				if err == nil {
					continue
				}
				// The answer of a restart whose start failed: g/a's own panic.
				ok := strings.Contains(err.Error(), `controller "`+g+`/a": panic in Run: run `) ||
					strings.Contains(err.Error(), `store "`+g+`/s": `) // its Recover's failure, the answer of the start

				for _, e := range allowed {
					ok = ok || errors.Is(err, e)
				}
				if !ok {
					errs <- fmt.Errorf("%s(%q): %w", name, path, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Both come back once the group and each child are started (a child
	// stopped by hand in a running group stays stopped until a StartChild
	// of its own; a call still busy with a restart the storm began is asked
	// again).
	running := func() bool {
		st, err := m.Status(ctx)
		require.NoError(t, err)
		for _, p := range []string{g + "/a", g + "/b", g + "/s"} {
			if c, _ := st.Child(p); c.State != cm.StateRunning {
				return false
			}
		}
		return true
	}
	// A replica that lost its Lease on a loaded machine may lose it again
	// to a starved renewal before it runs: the bound is generous, the
	// wait ends as soon as both run.
	settleStart := time.Now()
	settled := testchild.Eventually(3*wait, func() bool {
		for _, p := range paths {
			err := m.StartChild(ctx, p)
			if errors.Is(err, cm.ErrStopped) {
				t.Fatalf("the manager stopped: %v", m.Err())
			}
			require.True(t, err == nil || errors.Is(err, cm.ErrChildStopped) || errors.Is(err, cm.ErrAlreadyRunning) || errors.Is(err, cm.ErrBusy) ||
				errors.Is(err, cm.ErrStartInterrupted) || errors.Is(err, cm.ErrNotRunning) || errors.Is(err, cm.ErrShardNotHeld) ||
				strings.Contains(err.Error(), "panic in Run") || strings.Contains(err.Error(), "failed"), "StartChild(%q): %v", p, err)
		}
		return running()
	})
	t.Logf("both running %v after the calls ended", time.Since(settleStart).Round(time.Millisecond))
	if !settled {
		st, _ := m.Status(ctx)
		t.Fatalf("%s/a and %s/b not running after StartChild of each: phase %s, leader %v (holder %q): %+v", g, g, st.Phase, st.Leader, st.LeaderIdentity, st.Children)
	}

	st, err := m.Status(ctx)
	require.NoError(t, err)
	for _, c := range []*raceChild{a, b} {
		runs, _, _ := c.Counts()
		cs, _ := st.Child(g + "/" + c.Name())
		require.Equal(t, runs-1, cs.Restarts, "%s/%s: Restarts = runs-1 (%+v)", g, c.Name(), cs)
		require.Zero(t, c.overlaps.Load(), "%s/%s: two incarnations at once", g, c.Name())
	}
	ss, _ := st.Child(g + "/s")
	require.Equal(t, store.count()-1, ss.Restarts, "%s/s: Restarts = recovers-1 (%+v)", g, ss)
	require.Zero(t, store.overlaps.Load(), "%s/s: two incarnations at once", g)

	m.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err(), "the shutdown overran")
	for _, c := range []*raceChild{a, b} {
		require.Zero(t, c.live.Load(), "%s/%s: an incarnation without its Shutdown after the manager stopped", g, c.Name())
		require.Zero(t, c.overlaps.Load(), "%s/%s: two incarnations at once", g, c.Name())
	}
	require.Zero(t, store.live.Load(), "%s/s: an incarnation without its Shutdown after the manager stopped", g)
	require.Zero(t, store.overlaps.Load(), "%s/s: two incarnations at once", g)
}
