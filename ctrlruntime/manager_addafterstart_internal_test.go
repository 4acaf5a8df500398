package ctrlruntime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// An Add after Start records the child's name and readiness reporter once,
// when it is kept, not when it is refused (a second controller of a name);
// a kept child dropped because the manager stopped before it ran is
// forgotten; an Add after Start has returned records nothing.
func TestEnvAddAfterStartRecordsOnce(t *testing.T) {
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	id := "held-" + rand.String(6)
	now := metav1.NewMicroTime(time.Now())
	require.NoError(t, direct.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: id},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}))
	mgr, err := NewManager(cfg, manager.Options{
		Metrics:        metricsserver.Options{BindAddress: "0"},
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default",
	})
	require.NoError(t, err)
	recorded := func() [2]int { // readiness reporters, names
		mgr.mu.Lock()
		defer mgr.mu.Unlock()
		return [2]int{len(mgr.reporters), len(mgr.added)}
	}
	nop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	require.Eventually(t, func() bool {
		mgr.mu.Lock()
		defer mgr.mu.Unlock()
		return mgr.started
	}, 30*time.Second, time.Millisecond, "Start has begun")
	require.NoError(t, NewControllerManagedBy(mgr).Named("late").For(&coordinationv1.Lease{}).Complete(nop))
	assert.Equal(t, [2]int{1, 1}, recorded(), "kept once")
	require.Error(t, NewControllerManagedBy(mgr).Named("late").For(&coordinationv1.Lease{}).Complete(nop), "a second controller of a name")
	assert.Equal(t, [2]int{1, 1}, recorded(), "nothing recorded for the refused one")
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, [2]int{0, 0}, recorded(), "dropped and forgotten at the stop")
	require.Error(t, NewControllerManagedBy(mgr).Named("after").For(&coordinationv1.Lease{}).Complete(nop), "Add after Start returned")
	assert.Equal(t, [2]int{0, 0}, recorded(), "nothing recorded after Start returned")
}
