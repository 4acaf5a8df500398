package ctrlruntime_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/supervisor"
)

// startManager runs mgr.Start until the test ends, and checks it returns nil.
func startManager(t *testing.T, mgr *ctrlruntime.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			assert.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("Start did not return within a minute of its context's end")
		}
	})
}

// While a started controller's caches sync, liveness passes and readiness
// fails naming the controller; once they have synced both pass. /healthz
// never fails for what /readyz reports.
func TestEnvProbesDoNotFlapWhileCachesSync(t *testing.T) {
	cfg := testenv.Config(t)
	probeAddr := freeAddr(t)
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: probeAddr,
	})
	require.NoError(t, err)
	require.NoError(t, mgr.AddReadyzCheck(ctrlruntime.ReadyzCachesCheck, mgr.CachesSynced), "readiness of the caches is opt-in")
	gate := make(chan struct{})
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("gated").
		WatchesSource(func(cache.Cache) source.TypedSource[reconcile.Request] { return gatedSource{gate: gate} }).
		Complete(&recorder{}))
	startManager(t, mgr)

	require.Eventually(t, func() bool {
		code, body := probe("http://" + probeAddr + "/readyz/caches")
		return code == http.StatusInternalServerError && strings.Contains(body, "gated: waiting for the sources to sync")
	}, 30*time.Second, 5*time.Millisecond, "readiness names the controller whose caches sync")
	code, body := get(t, "http://"+probeAddr+"/healthz")
	assert.Equal(t, http.StatusOK, code, "liveness passes while the caches sync: %s", body)

	close(gate)
	require.Eventually(t, func() bool {
		code, _ := probe("http://" + probeAddr + "/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 5*time.Millisecond, "ready once synced")
	code, body = get(t, "http://"+probeAddr+"/healthz")
	assert.Equal(t, http.StatusOK, code, body)
}

// flagRunnable records that its Start ran, and blocks until its context ends.
type flagRunnable struct {
	started    atomic.Bool
	needLeader bool
}

func (r *flagRunnable) Start(ctx context.Context) error {
	r.started.Store(true)
	<-ctx.Done()
	return nil
}

func (r *flagRunnable) NeedLeaderElection() bool { return r.needLeader }

// A standby (the Lease held by another) runs the runnables that need no
// election, not the others; it answers liveness and readiness.
func TestEnvStandbyRunsWhatNeedsNoElection(t *testing.T) {
	cfg := testenv.Config(t)
	probeAddr := freeAddr(t)
	setup, err := ctrlruntime.NewManager(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	id := "held-" + rand.String(6)
	now := metav1.NewMicroTime(time.Now())
	require.NoError(t, setup.GetClient().Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: id},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}))

	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: probeAddr,
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default",
	})
	require.NoError(t, err)
	everywhere, leaderOnly := &flagRunnable{}, &flagRunnable{needLeader: true}
	require.NoError(t, mgr.Add(everywhere))
	require.NoError(t, mgr.Add(leaderOnly))
	startManager(t, mgr)

	require.Eventually(t, everywhere.started.Load, 30*time.Second, time.Millisecond, "a runnable that needs no election runs on a standby")
	require.Eventually(t, func() bool {
		code, _ := probe("http://" + probeAddr + "/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 5*time.Millisecond, "a standby is ready")
	code, body := get(t, "http://"+probeAddr+"/healthz")
	assert.Equal(t, http.StatusOK, code, body)
	assert.False(t, leaderOnly.started.Load(), "a runnable that needs the election waits for it")
	select {
	case <-mgr.Elected():
		t.Error("elected although the Lease is held by another")
	default:
	}
}

// A controller built by controller-runtime's own builder runs once: a
// restart of it fails with ErrNotRestartable, which names the fix.
func TestEnvPlainControllerRestartIsErrNotRestartable(t *testing.T) {
	cfg := testenv.Config(t)
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		cm.SupervisionSpec{MaxRestarts: 1, InitialBackoff: metav1.Duration{Duration: time.Millisecond}})
	require.NoError(t, err)
	name := "once-" + rand.String(6)
	require.NoError(t, ctrl.NewControllerManagedBy(mgr).Named(name).WithOptions(controllerOptions()).
		For(&corev1.ConfigMap{}).Complete(&recorder{}))
	failures := make(chan error, 16)
	mgr.ControllerManager().Subscribe(func(e cm.Event) {
		if e.Child == name && e.Err != nil {
			select {
			case failures <- e.Err:
			default:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	// RestartChild is for a running manager: past Elected, the controllers
	// are still starting.
	require.Eventually(t, mgr.ControllerManager().IsStarted, time.Minute, time.Millisecond)
	_, err = mgr.ControllerManager().Request(ctx, supervisor.RestartChild{Name: name})
	if err == nil {
		select {
		case err = <-failures:
		case <-time.After(time.Minute):
			t.Fatal("no failure of the restarted controller within a minute")
		}
	}
	assert.ErrorIs(t, err, ctrlruntime.ErrNotRestartable)

	// Each retry fails the same way: past the budget the manager
	// escalates, and Start returns the cause, as controller-runtime's
	// manager stops on a runnable's error.
	select {
	case err := <-stopped:
		assert.ErrorIs(t, err, ctrlruntime.ErrNotRestartable)
	case <-time.After(time.Minute):
		t.Fatal("the manager did not escalate within a minute")
	}
}

// A supervision spec the tree refuses is NewManagerWithSupervision's error,
// naming the field, before anything contacts the server.
func TestNewManagerWithSupervisionValidatesTheSpec(t *testing.T) {
	_, err := ctrlruntime.NewManagerWithSupervision(testConfigWithoutServer(), manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		cm.SupervisionSpec{MaxRestarts: -1})
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "maxrestarts")
}
