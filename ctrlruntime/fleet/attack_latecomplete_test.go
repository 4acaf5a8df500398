package fleet_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// A reconciler registered after the manager started but before its
// fleet engaged any cluster (a platform whose provider finds its clusters
// later) runs on the clusters engaged after it; once one is engaged, a
// further registration is refused, the same builder's included.
func TestEnvAttackCompleteAfterStartBeforeEngage(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "late-" + rand.String(6)
	newNamespace(t, cl, ns)
	mgr := fleet.NewManager(fleet.Options{})
	p := newHandProvider()
	f := cm.NewFleet("fleet", p, mgr.Build, fastProbes)
	startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	engage, _ := p.funcs(t)
	b := fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{})
	require.NoError(t, b.Complete(&mirror{mgr: mgr, ns: ns}))
	require.NoError(t, engage("a", rest.CopyConfig(config)))
	waitState(t, f, "a", cm.ClusterStateOnline)
	createSecret(t, cl, ns, "one")
	waitMirrored(t, cl, ns, "one", "a")
	require.ErrorContains(t, b.Named("mirror2").Complete(&mirror{mgr: mgr, ns: ns}), "after the fleet engaged")
}
