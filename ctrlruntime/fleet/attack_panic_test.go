package fleet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// A reconciler that panics on one object, registered with
// WithOptions(RecoverPanic: false) (a platform team's default copied from
// a single-cluster controller): one member's bad object must not take the
// process, and every other member, down. The panic is recovered, and the
// member's other objects are reconciled.
func TestEnvAttackPanicWithRecoverPanicOff(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "pan-" + rand.String(6)
	newNamespace(t, cl, ns)
	var panics, good atomic.Int32
	r := fleet.Func(func(_ context.Context, req fleet.Request) (reconcile.Result, error) {
		if req.Namespace != ns {
			return reconcile.Result{}, nil
		}
		if req.Name == "bad" {
			panics.Add(1)
			panic("bad object")
		}
		good.Add(1)
		return reconcile.Result{}, nil
	})
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).For(&corev1.Secret{}).
		WithOptions(crcontroller.Options{RecoverPanic: ptr.To(false)}).Complete(r))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": rest.CopyConfig(config)}), mgr.Build, fastProbes)
	startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	waitState(t, f, "a", cm.ClusterStateOnline)
	createSecret(t, cl, ns, "bad")
	require.Eventually(t, func() bool { return panics.Load() > 0 }, waitFor, 10*time.Millisecond)
	createSecret(t, cl, ns, "good")
	require.Eventually(t, func() bool { return good.Load() > 0 }, waitFor, 10*time.Millisecond)
}
