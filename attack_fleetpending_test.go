package controllermanager_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// heldStore is a member's store whose first Recover waits until its
// context ends (informers that never sync); the others return at once.
type heldStore struct {
	recovers *atomic.Int32
	held     chan struct{} // closed once the first Recover waits
	once     *sync.Once
}

func (s heldStore) Name() string { return "cache" }
func (s heldStore) Recover(ctx context.Context) error {
	if s.recovers.Add(1) != 1 {
		return nil
	}
	s.once.Do(func() { close(s.held) })
	<-ctx.Done()
	return ctx.Err()
}
func (heldStore) Shutdown(context.Context) {}
func (heldStore) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cache", Healthy: true}
}

// The lease is lost while a member's add waits for its store's Recover
// (the manager stands down, LeaseLostReelect, and is elected again): the
// add ends with the stand-down, and once re-elected the member runs, its
// controller on a live Cluster, never one started on an ended one.
func TestAttackFleetLeaseLostWhileAMembersAddWaitsForItsStore(t *testing.T) {
	var recovers, runs, stale atomic.Int32
	held := make(chan struct{})
	var once sync.Once
	build := func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{cm.StoreChild(heldStore{recovers: &recovers, held: held, once: &once}),
			&ctxCtrl{cluster: c, stale: &stale, runs: &runs}}
	}
	client := leasetest.NewServer().Client("a")
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostReelect), Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	a := newFakeMember(t, memberOK)
	m.Add(cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), build, fleetSpec()))
	log := subscribe(t, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	awaitRecv(t, held, "the member store's first Recover")

	client.Partition(true)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(m); p == supervisor.PhaseRunning {
			return "still running"
		}
		return ""
	})
	client.Partition(false)
	pollUntil(t, 3*elWait, func() string {
		if p := managerPhase(m); p != supervisor.PhaseRunning {
			return "phase " + string(p)
		}
		cs, ok := fleetChild(t, m, "fleet/a/ctrl")
		if !ok || cs.State != supervisor.StateRunning {
			return "fleet/a/ctrl not running"
		}
		return ""
	})
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	require.Zero(t, stale.Load(), "a controller started on an ended Cluster (of %d runs)", runs.Load())
	require.GreaterOrEqual(t, recovers.Load(), int32(2), "the store recovered again")
}

// deafStore is a member's store whose Recover ignores its context until
// release is closed.
type deafStore struct {
	held, release chan struct{}
	once          *sync.Once
}

func (s deafStore) Name() string { return "cache" }
func (s deafStore) Recover(context.Context) error {
	s.once.Do(func() { close(s.held) })
	<-s.release
	return nil
}
func (deafStore) Shutdown(context.Context) {}
func (deafStore) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cache", Healthy: true}
}

// The manager is shut down while a member's add waits for a store whose
// Recover ignores its context: ShutdownAndWait returns when its context
// ends (docs/architecture.md, "Shutdown"), and says which call holds the
// manager: the member's store, its Recover not returned.
func TestAttackFleetShutdownWhileAMembersStoreIgnoresItsContext(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	build := func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{cm.StoreChild(deafStore{held: held, release: release, once: &once}), &clusterCtrl{cluster: c}}
	}
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: gFast()}, "", elQuiet)
	require.NoError(t, err)
	a := newFakeMember(t, memberOK)
	m.Add(cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), build, fleetSpec()))
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	awaitRecv(t, held, "the member store's Recover")
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	m.ShutdownAndWait(sctx) // returns once sctx has ended, the Recover still held
	require.Error(t, m.Err())
	require.Contains(t, m.Err().Error(), `store "fleet/a/cache"`, "the unstopped report names the member's store")
	require.Contains(t, m.Err().Error(), "its Recover has not returned")
	var u *supervisor.UnstoppedError
	require.ErrorAs(t, m.Err(), &u)
}
