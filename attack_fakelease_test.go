package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
)

// attackFake is client-go's plain fake clientset with a reactor in front
// of every Lease call: latency, and a cut that fails writes (or all calls).
type attackFake struct {
	*fake.Clientset
	latency   atomic.Int64 // ns
	cutWrites atomic.Bool
	cutAll    atomic.Bool
	updates   atomic.Int64
}

func newAttackFake() *attackFake {
	f := &attackFake{Clientset: fake.NewSimpleClientset()}
	f.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if d := time.Duration(f.latency.Load()); d > 0 {
			time.Sleep(d) // latency of the fake API server (not synchronisation)
		}
		if f.cutAll.Load() {
			return true, nil, errors.New("attack: network cut")
		}
		switch a.GetVerb() {
		case "update", "create", "patch":
			f.updates.Add(1)
			if f.cutWrites.Load() {
				return true, nil, errors.New("attack: network cut (writes)")
			}
		}
		return false, nil, nil
	})
	return f
}

// guardedCtrl runs a worker from Run until Shutdown that checks its lease
// guard in a loop; it records every pass after the manager was Done.
type guardedCtrl struct {
	name       string
	m          atomic.Pointer[cm.ControllerManager]
	runs       atomic.Int32
	shutdowns  atomic.Int32
	mu         sync.Mutex
	stop       context.CancelFunc
	wg         sync.WaitGroup
	passAfter  atomic.Int32 // guard passes seen after Done
	runPanics  bool
	hangOnStop chan struct{}
}

func (c *guardedCtrl) Name() string { return c.name }
func (c *guardedCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}
func (c *guardedCtrl) Run(ctx context.Context) error {
	c.runs.Add(1)
	guard, ok := actors.LeaseGuard(ctx)
	if !ok {
		return errors.New("no lease guard")
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.mu.Lock()
	c.stop = stop
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for wctx.Err() == nil {
			if guard() == nil {
				if m := c.m.Load(); m != nil {
					select {
					case <-m.Done():
						c.passAfter.Add(1)
					default:
					}
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return nil
}
func (c *guardedCtrl) Shutdown(ctx context.Context) {
	c.mu.Lock()
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.wg.Wait()
	c.shutdowns.Add(1)
	if c.hangOnStop != nil {
		<-c.hangOnStop
	}
}

func newAttackManager(t *testing.T, f *attackFake, onLost cm.LeaseLostAction, ctrls ...cm.Runnable) *cm.ControllerManager {
	t.Helper()
	m, err := cm.NewControllerManager(cm.NewContext(f), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(onLost)}, "",
		cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	m.Add(ctrls...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m
}

// One answer per shutdown, when a ShutdownAndWait meets a lease lost to a
// network cut on client-go's plain fake with 100 ms per Lease call:
// every caller returns within its context, the manager is Done, Err and
// Status agree, the guard never passes after Done, and Run ran once.
func TestAttackShutdownMeetsNetworkCut(t *testing.T) {
	t.Parallel() // waits on the real clock (lease expiries) most of its time
	for _, onLost := range []cm.LeaseLostAction{cm.LeaseLostExit, cm.LeaseLostReelect} {
		for _, cut := range []string{"writes", "all"} {
			t.Run(fmt.Sprintf("%s/%s", onLost, cut), func(t *testing.T) {
				f := newAttackFake()
				f.latency.Store(int64(100 * time.Millisecond))
				c := &guardedCtrl{name: "ctrl"}
				m := newAttackManager(t, f, onLost, c)
				c.m.Store(m)
				sctx, scancel := context.WithTimeout(context.Background(), elWait)
				defer scancel()
				require.NoError(t, m.Start(sctx, 0))
				// Cut at the worst moment: right after a renewal went out.
				n := f.updates.Load()
				elEventually(t, "a renewal", func() bool { return f.updates.Load() > n })
				if cut == "writes" {
					f.cutWrites.Store(true)
				} else {
					f.cutAll.Store(true)
				}
				var wg sync.WaitGroup
				for i := 0; i < 4; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), elWait)
						defer cancel()
						m.ShutdownAndWait(ctx)
						require.NoError(t, ctx.Err(), "ShutdownAndWait ran out its context")
					}()
				}
				wg.Wait()
				requireOneAnswer(t, m, c)
			})
		}
	}
}

// The same, with the ShutdownAndWait calls sent the moment the loss is
// published (LeaderLost), or the moment the replica re-enters Electing:
// the closest a host gets to "at the same moment as a lease loss".
func TestAttackShutdownOnLeaderLost(t *testing.T) {
	t.Parallel() // waits on the real clock (lease expiries) most of its time
	for _, onLost := range []cm.LeaseLostAction{cm.LeaseLostExit, cm.LeaseLostReelect} {
		for _, trigger := range []cm.EventType{cm.LeaderLost, cm.PhaseChanged} {
			t.Run(fmt.Sprintf("%s/%s", onLost, trigger), func(t *testing.T) {
				f := newAttackFake()
				f.latency.Store(int64(100 * time.Millisecond))
				c := &guardedCtrl{name: "ctrl"}
				m := newAttackManager(t, f, onLost, c)
				c.m.Store(m)
				fired := make(chan struct{})
				var once sync.Once
				var wg sync.WaitGroup
				results := make(chan error, 4)
				wg.Add(4)
				cut := atomic.Bool{}
				m.Subscribe(func(e cm.Event) {
					if !cut.Load() || e.Type != trigger {
						return
					}
					once.Do(func() {
						close(fired)
						for i := 0; i < 4; i++ {
							go func() {
								defer wg.Done()
								ctx, cancel := context.WithTimeout(context.Background(), elWait)
								defer cancel()
								m.ShutdownAndWait(ctx)
								results <- ctx.Err()
							}()
						}
					})
				})
				sctx, scancel := context.WithTimeout(context.Background(), elWait)
				defer scancel()
				require.NoError(t, m.Start(sctx, 0))
				n := f.updates.Load()
				elEventually(t, "a renewal", func() bool { return f.updates.Load() > n })
				cut.Store(true)
				f.cutWrites.Store(true)
				select {
				case <-fired:
				case <-time.After(elWait):
					t.Fatal("no loss")
				}
				wg.Wait()
				close(results)
				for err := range results {
					require.NoError(t, err, "ShutdownAndWait ran out its context")
				}
				requireOneAnswer(t, m, c)
			})
		}
	}
}

// requireOneAnswer: every ShutdownAndWait has returned; the manager is
// Done, its Err is nil (Stopped) or ErrLost (Failed), the same twice and
// the same as Status's, its guards refuse, and c ran and was shut down
// once.
func requireOneAnswer(t *testing.T, m *cm.ControllerManager, c *guardedCtrl) {
	t.Helper()
	select {
	case <-m.Done():
	default:
		t.Fatal("ShutdownAndWait returned, manager not Done")
	}
	err1 := m.Err()
	st, serr := m.Status(context.Background())
	if serr == nil {
		if err1 == nil && st.Phase != cm.PhaseStopped || err1 != nil && st.Phase != cm.PhaseFailed {
			t.Fatalf("Err %v but phase %s", err1, st.Phase)
		}
		if fmt.Sprint(st.Err) != fmt.Sprint(err1) {
			t.Fatalf("Status.Err %v, Err %v", st.Err, err1)
		}
	}
	require.Equal(t, fmt.Sprint(err1), fmt.Sprint(m.Err()), "Err changed")
	if err1 != nil && !errors.Is(err1, lease.ErrLost) {
		t.Fatalf("Err is neither nil nor ErrLost: %v", err1)
	}
	require.Error(t, m.LeaseGuard(), "guard passes after Done")
	require.Zero(t, c.passAfter.Load(), "worker's guard passed after Done")
	require.Equal(t, int32(1), c.runs.Load(), "runs")
	require.Equal(t, int32(1), c.shutdowns.Load(), "shutdowns")
}
