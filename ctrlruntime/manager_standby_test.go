package ctrlruntime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// heldLease creates a Lease held by another replica for an hour, and
// returns its name: a manager electing on it is a standby.
func heldLease(t *testing.T, cl client.Client) string {
	t.Helper()
	id := "held-" + rand.String(6)
	now := metav1.NewMicroTime(time.Now())
	require.NoError(t, cl.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: id},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}))
	return id
}

// rotatorWrapper is cert-controller's controllerWrapper: the rotator's
// reconciler, built unmanaged, added with the NeedLeaderElection its
// RequireLeaderElection says (JobSet sets it false).
type rotatorWrapper struct {
	controller.Controller
	needLeaderElection bool
}

func (w *rotatorWrapper) NeedLeaderElection() bool { return w.needLeaderElection }

// On a standby, what needs no election runs as under controller-runtime:
// cert-controller's rotator pattern (an unmanaged controller wrapped with
// NeedLeaderElection false, beside the rotator, a plain runnable with
// NeedLeaderElection false) and a controller built with
// controller.Options.NeedLeaderElection false; a controller that needs the
// election does not run.
func TestEnvStandbyRunsControllersThatNeedNoElection(t *testing.T) {
	cfg := testenv.Config(t)
	setup, err := ctrlruntime.NewManager(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	require.NoError(t, err)
	lease := heldLease(t, setup.GetClient())
	ns := namespace(t, setup.GetClient())

	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics:        metricsserver.Options{BindAddress: "0"},
		LeaderElection: true, LeaderElectionID: lease, LeaderElectionNamespace: "default",
	})
	require.NoError(t, err)

	certs := &recorder{}
	c, err := controller.NewUnmanaged("cert-rotator-"+rand.String(6), controller.Options{Reconciler: certs})
	require.NoError(t, err)
	require.NoError(t, c.Watch(source.Kind(mgr.GetCache(), &corev1.Secret{}, &handler.TypedEnqueueRequestForObject[*corev1.Secret]{},
		predicate.NewTypedPredicateFuncs(func(s *corev1.Secret) bool { return s.Namespace == ns }))))
	require.NoError(t, mgr.Add(&rotatorWrapper{Controller: c, needLeaderElection: false}))
	rotator := &flagRunnable{needLeader: false}
	require.NoError(t, mgr.Add(rotator))

	unelected := &recorder{}
	uc, err := controller.New("unelected-"+rand.String(6), mgr, controller.Options{
		Reconciler: unelected, NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true),
	})
	require.NoError(t, err)
	// controller.New has added the controller; its sources come after, as
	// with controller-runtime.
	require.NoError(t, uc.Watch(source.Kind(mgr.GetCache(), &corev1.Secret{}, &handler.TypedEnqueueRequestForObject[*corev1.Secret]{},
		predicate.NewTypedPredicateFuncs(func(s *corev1.Secret) bool { return s.Namespace == ns }))))
	leaderOnly := &recorder{}
	lc, err := controller.New("leader-only-"+rand.String(6), mgr, controller.Options{Reconciler: leaderOnly, SkipNameValidation: ptr.To(true)})
	require.NoError(t, err)
	require.NoError(t, lc.Watch(source.Kind(mgr.GetCache(), &corev1.Secret{}, &handler.TypedEnqueueRequestForObject[*corev1.Secret]{},
		predicate.NewTypedPredicateFuncs(func(s *corev1.Secret) bool { return s.Namespace == ns }))))
	startManager(t, mgr)

	require.NoError(t, setup.GetClient().Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-server-cert"}}))
	require.Eventually(t, func() bool { return certs.saw("webhook-server-cert") }, time.Minute, 5*time.Millisecond,
		"the rotator's reconciler reconciles on a standby")
	require.Eventually(t, func() bool { return unelected.saw("webhook-server-cert") }, time.Minute, 5*time.Millisecond,
		"a controller built with NeedLeaderElection false reconciles on a standby")
	require.Eventually(t, rotator.started.Load, time.Minute, time.Millisecond, "the rotator runs on a standby")
	assert.False(t, leaderOnly.saw("webhook-server-cert"), "a controller that needs the election waits for it")
	select {
	case <-mgr.Elected():
		t.Error("elected although the Lease is held by another")
	default:
	}
}
