package fleet_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/supervisor"
)

// A platform team restarts one member's store "cluster" (RestartChild, as
// after a suspected stale cache): its cache.Cluster is replaced, and the
// member's reconciler must go on reconciling, on the new cache, not sit on
// the stopped one.
func TestEnvAttackStoreRestartKeepsReconciling(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "rs-" + rand.String(6)
	newNamespace(t, cl, ns)
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": rest.CopyConfig(config)}), mgr.Build, fastProbes)
	cmgr := startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	waitState(t, f, "a", cm.ClusterStateOnline)
	createSecret(t, cl, ns, "one")
	waitMirrored(t, cl, ns, "one", "a")
	before, err := mgr.GetCluster(context.Background(), "a")
	require.NoError(t, err)

	_, err = cmgr.Request(context.Background(), supervisor.RestartChild{Name: "fleet/a/cluster"})
	require.NoError(t, err)
	createSecret(t, cl, ns, "two")
	waitMirrored(t, cl, ns, "two", "a")
	after, err := mgr.GetCluster(context.Background(), "a")
	require.NoError(t, err)
	require.NotSame(t, before, after, "the restart built a new cluster.Cluster")
}

// b's API server answers its probes, but its discovery is slow and fails,
// three times in a row, then works: the store "cluster" fails thrice
// (a second each) and recovers. The reconciler must not spend its restart
// budget meanwhile (5 in a minute), which would stop b's group for good
// (Failed) although its store came back: b ends Online and reconciles,
// its reconciler never restarted.
func TestEnvAttackStoreFailsSlowlyThenRecovers(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "rs-" + rand.String(6)
	newNamespace(t, cl, ns)
	b := rest.CopyConfig(config)
	var fails atomic.Int32
	b.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/api" && fails.Load() < 3 {
				select { // a slow answer: latency, not a synchronisation
				case <-time.After(time.Second):
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
				fails.Add(1)
				return nil, errors.New("discovery failed")
			}
			return rt.RoundTrip(r)
		})
	})
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"b": b}), mgr.Build, fastProbes)
	cmgr := startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	require.Eventually(t, func() bool {
		_, err := mgr.GetCluster(context.Background(), "b")
		return err == nil
	}, waitFor, 20*time.Millisecond, "b's cache never ran")
	createSecret(t, cl, ns, "one")
	waitMirrored(t, cl, ns, "one", "b")
	fs, _ := f.Cluster("b")
	require.Equal(t, cm.ClusterStateOnline, fs.State, "%+v", fs)
	st, err := cmgr.Status(context.Background())
	require.NoError(t, err)
	cs, _ := st.Child("fleet/b/mirror")
	require.Zero(t, cs.Restarts, "the reconciler was restarted for its store's failures")
}
