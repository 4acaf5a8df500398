package fleet_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
)

func nop(context.Context, fleet.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }

func TestBuilderRefusesWhatCannotRun(t *testing.T) {
	mgr := fleet.NewManager(fleet.Options{})
	err := fleet.ControllerManagedBy(mgr).Complete(nil)
	require.ErrorContains(t, err, "For was not called")
	require.ErrorContains(t, err, "reconciler is nil")
	require.ErrorContains(t, fleet.ControllerManagedBy(nil).For(&corev1.Secret{}).Complete(fleet.Func(nop)), "manager is nil")

	err = fleet.ControllerManagedBy(mgr).For(&corev1.Pod{}).Watches(nil, nil).WatchesMetadata(&corev1.Secret{}, nil).Complete(fleet.Func(nop))
	require.ErrorContains(t, err, "Watches <nil>: object and handler must not be nil")
	require.ErrorContains(t, err, "WatchesMetadata *v1.Secret: object and handler must not be nil")

	require.NoError(t, fleet.ControllerManagedBy(mgr).For(&corev1.Secret{}).Complete(fleet.Func(nop)))
	require.ErrorContains(t, fleet.ControllerManagedBy(mgr).Named("secret").For(&corev1.ConfigMap{}).Complete(fleet.Func(nop)),
		`a reconciler named "secret" is already registered`, "the default name is the For type's, lower case")
}

func TestGetClusterOfAClusterNotEngaged(t *testing.T) {
	_, err := fleet.NewManager(fleet.Options{}).GetCluster(context.Background(), "nowhere")
	require.ErrorIs(t, err, fleet.ErrClusterNotFound)
}

func TestRequestStringNamesTheCluster(t *testing.T) {
	req := fleet.Request{ClusterName: "east"}
	req.Namespace, req.Name = "ns", "obj"
	require.Equal(t, "east/ns/obj", req.String())
}
