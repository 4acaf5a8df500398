package ctrlruntime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// poisonReconcile panics on the object named "poison".
func poisonReconcile(_ context.Context, req reconcile.Request) error {
	if req.Name == "poison" {
		panic("cannot handle " + req.Name)
	}
	return nil
}

// A reconcile's panic is counted and logged as controller-runtime counts
// and logs it (controller_runtime_reconcile_panics_total, "Observed a
// panic" with its stack, on the controller's logger), the panic that fails
// the child is counted in controllermanager_child_panics_total, and the
// supervisor restarts the reconciler.
func TestEnvReconcilePanicIsCountedLoggedAndSupervised(t *testing.T) {
	cfg := testenv.Config(t)
	logs := &logLines{}
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  logs.logger(),
	}, cm.SupervisionSpec{
		InitialBackoff: metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
		MaxRestarts:    1000, RestartWindow: metav1.Duration{Duration: time.Hour},
	})
	require.NoError(t, err)
	ns := namespace(t, mgr.GetClient())
	name := "poisoned-" + rand.String(6)
	poisoned := &recorder{behave: poisonReconcile}
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named(name).
		For(&corev1.ConfigMap{}, builder.WithPredicates(inNS(ns))).
		WithSupervision(ctrlruntime.Options{PanicThreshold: 2}).Complete(poisoned))
	restarted := make(chan struct{})
	var once sync.Once
	mgr.ControllerManager().Subscribe(func(e cm.Event) {
		if e.Child == name && e.Type == cm.ChildRestarted {
			once.Do(func() { close(restarted) })
		}
	})
	startManager(t, mgr)

	require.NoError(t, mgr.GetClient().Create(context.Background(), configMap(ns, "poison")))
	select {
	case <-restarted:
	case <-time.After(time.Minute):
		t.Fatal("the reconciler was not restarted within a minute")
	}
	assert.GreaterOrEqual(t, gathered(t, ctrlmetrics.Registry, "controller_runtime_reconcile_panics_total", "controller", name), 2.0,
		"every panic is counted as controller-runtime counts it")
	assert.GreaterOrEqual(t, gathered(t, mgr.ControllerManager().Gatherer(), "controllermanager_child_panics_total", "child", name), 1.0,
		"the panic that failed the child is counted as the manager counts a child's panic")
	observed := logs.with(`"msg"="Observed a panic"`, `"controller"="`+name+`"`, `"stacktrace"=`, "poisonReconcile")
	assert.NotEmpty(t, observed, "controller-runtime's line, on the controller's logger, with the stack of the panicking reconcile")
}
