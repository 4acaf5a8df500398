package ctrlruntime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// A reconciler built with New on a Manager's Context takes the manager's
// controller defaults (manager.Options.Controller) where its options leave
// a field zero, as controller.NewTyped(name, mgr, opts) takes them from
// mgr.GetControllerOptions(): MaxConcurrentReconciles (three reconciles
// run at once), NeedLeaderElection (false: it runs on every replica) and
// RecoverPanic (false: the first panic fails the reconciler, which the
// supervisor restarts).
func TestEnvNewTakesTheManagersControllerDefaults(t *testing.T) {
	cfg := testenv.Config(t)
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{
			MaxConcurrentReconciles: 3, NeedLeaderElection: ptr.To(false), RecoverPanic: ptr.To(false),
		},
	}, cm.SupervisionSpec{
		InitialBackoff: metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
		MaxRestarts:    1000, RestartWindow: metav1.Duration{Duration: time.Hour},
	})
	require.NoError(t, err)

	events := make(chan event.GenericEvent, 8)
	release := make(chan struct{})
	var running, most atomic.Int32
	name := "defaults-" + rand.String(6)
	c, err := ctrlruntime.New[reconcile.Request](mgr.Context(), name,
		reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Name == "poison" {
				panic("cannot handle " + req.Name)
			}
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return reconcile.Result{}, nil
		}),
		ctrlruntime.Options{},
		func(cache.Cache) source.Source { return source.Channel(events, &handler.EnqueueRequestForObject{}) })
	require.NoError(t, err)
	assert.False(t, c.NeedLeaderElection(), "the manager's Controller.NeedLeaderElection")
	require.NoError(t, mgr.Add(c))
	ce := watchChild(mgr, name)
	startManager(t, mgr)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the manager stops

	for _, n := range []string{"a", "b", "c"} {
		events <- event.GenericEvent{Object: configMap("default", n)}
	}
	require.Eventually(t, func() bool { return most.Load() >= 3 }, 30*time.Second, 5*time.Millisecond,
		"the manager's Controller.MaxConcurrentReconciles (3): three reconciles at once")
	releaseOnce()

	events <- event.GenericEvent{Object: configMap("default", "poison")}
	require.Eventually(t, func() bool { return ce.count(cm.ChildFailed) >= 1 }, 30*time.Second, 5*time.Millisecond,
		"the manager's Controller.RecoverPanic false: the first panic fails the reconciler")
	failed, _ := ce.first(cm.ChildFailed)
	var perr *ctrlruntime.ReconcilePanicError
	assert.ErrorAs(t, failed.Err, &perr)
}
