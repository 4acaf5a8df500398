package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// The manager elects itself on client-go's fake clientset (its Lease
// there, LeaseLostReelect), its member a on a real API server. The
// Lease is lost (its API cut off) while a is being engaged, then comes
// back: the manager is elected again, a goes Online on a fresh cache and
// reconciles, and GetCluster serves that cache.
func TestEnvAttackLeaseLostWhileEngaging(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "rel-" + rand.String(6)
	newNamespace(t, cl, ns)

	kube := fake.NewClientset()
	var cut atomic.Bool
	kube.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cut.Load() {
			return true, nil, errors.New("lease API cut off")
		}
		return false, nil, nil
	})
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": rest.CopyConfig(config)}), mgr.Build, fastProbes)
	cmgr := startManager(t, kube, cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
		Enabled: ptr.To(true), LeaseName: "fleet", LeaseNamespace: "default", OnLeaseLost: cm.LeaseLostReelect,
		LeaseDuration: metav1.Duration{Duration: 2 * time.Second}, RenewDeadline: metav1.Duration{Duration: time.Second},
		RetryPeriod: metav1.Duration{Duration: 200 * time.Millisecond},
	}}, f, cm.WithIdentity("r1"))
	cut.Store(true) // a is being engaged
	require.Eventually(t, func() bool {
		st, err := cmgr.Status(context.Background())
		return err == nil && !st.Leader
	}, waitFor, 20*time.Millisecond, "the lease was never lost")
	cut.Store(false)
	require.Eventually(t, func() bool {
		st, err := cmgr.Status(context.Background())
		return err == nil && st.Leader
	}, waitFor, 20*time.Millisecond, "never elected again")
	waitState(t, f, "a", cm.ClusterStateOnline)
	createSecret(t, cl, ns, "one")
	waitMirrored(t, cl, ns, "one", "a")
	_, err = mgr.GetCluster(context.Background(), "a")
	require.NoError(t, err)
}
