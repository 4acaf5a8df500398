package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// TestLeaseStaleUpdateConflicts proves the harness against the one behaviour leader
// election rests on: the real apiserver rejects a Lease update carrying a stale
// resourceVersion with 409 Conflict, which a fake clientset does not do by itself.
func TestLeaseStaleUpdateConflicts(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	client := c.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	version, err := client.Discovery().ServerVersion()
	require.NoError(t, err)
	require.Equal(t, "v1.37.2", version.GitVersion, "the binary's version variables were not set at build time")

	// A namespace of its own: the apiserver creates "default" asynchronously, and later
	// tests may share a cluster.
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-conflict-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	leases := client.CoordinationV1().Leases(ns.Name)

	holder, duration := "replica-a", int32(15)
	created, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// replica-b takes the lease from the version it read...
	fresh := created.DeepCopy()
	takeover := "replica-b"
	fresh.Spec.HolderIdentity = &takeover
	updated, err := leases.Update(ctx, fresh, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NotEqual(t, created.ResourceVersion, updated.ResourceVersion)

	// ...so replica-a, renewing from the version it created, must lose.
	stale := created.DeepCopy()
	renew := metav1.NewMicroTime(time.Now())
	stale.Spec.RenewTime = &renew
	_, err = leases.Update(ctx, stale, metav1.UpdateOptions{})
	require.Error(t, err)
	require.True(t, apierrors.IsConflict(err), "want a Conflict, have %v", err)
	var status apierrors.APIStatus
	require.ErrorAs(t, err, &status)
	require.Equal(t, int32(http.StatusConflict), status.Status().Code)

	have, err := leases.Get(ctx, "smoke", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, takeover, *have.Spec.HolderIdentity, "the stale update must not have been applied")
}
