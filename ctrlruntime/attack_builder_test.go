package ctrlruntime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

func nopReconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, nil
}

// The same builder completed twice (a SetupWithManager called twice, by
// two code paths of a platform's setup): as with controller-runtime, the
// second is refused naming the controller, before Start, rather than a
// Start that fails on two children of one name.
func TestEnvAttackSameBuilderCompletedTwice(t *testing.T) {
	config := testenv.Config(t)
	mgr, err := ctrlruntime.NewManager(config, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	b := ctrlruntime.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{})
	require.NoError(t, b.Complete(reconcile.Func(nopReconcile)))
	second := b.Complete(reconcile.Func(nopReconcile))
	require.ErrorContains(t, second, `controller with name configmap already exists`)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	var startErr error
	select {
	case <-mgr.Elected():
	case startErr = <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("neither elected nor stopped within a minute")
	}
	cancel()
	if startErr == nil {
		startErr = <-stopped
	}
	require.NoError(t, startErr, "the first reconciler runs")
}
