package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// requests counts the requests a reconciler got, by cluster and name.
type requests struct {
	mu  sync.Mutex
	got map[string]int
}

func (r *requests) Reconcile(_ context.Context, req fleet.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[req.ClusterName+"/"+req.Namespace+"/"+req.Name]++
	return reconcile.Result{}, nil
}

func (r *requests) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[key]
}

// The fleet's builder takes controller-runtime's builder calls in
// mcbuilder's shape: For with WithPredicates, Owns (the controlling owner
// is enqueued), Watches with a handler, WithEventFilter on every watch and
// WithOptions; each request carries the member cluster's name.
func TestEnvFleetBuilderOwnsWatchesAndPredicates(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "fleetb-" + rand.String(6)
	newNamespace(t, cl, ns)

	got := &requests{got: map[string]int{}}
	mgr := fleet.NewManager(fleet.Options{})
	labelled := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["watch"] == "yes" })
	inNS := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
	toConfigMap := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := strings.CutPrefix(o.GetName(), "sa-")
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	var notMetadata atomic.Value // the type WatchesMetadata's handler got, if not metadata only
	metaToConfigMap := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if _, ok := o.(*metav1.PartialObjectMetadata); !ok {
			notMetadata.Store(fmt.Sprintf("%T", o))
		}
		name, ok := strings.CutPrefix(o.GetName(), "rq-")
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("builder").
		For(&corev1.ConfigMap{}, fleet.WithPredicates(labelled)).
		Owns(&corev1.Secret{}).
		Watches(&corev1.ServiceAccount{}, toConfigMap).
		WatchesMetadata(&corev1.ResourceQuota{}, metaToConfigMap).
		WithEventFilter(inNS).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 2, RecoverPanic: ptr.To(true)}).
		Complete(got))

	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": rest.CopyConfig(config)}), mgr.Build, cm.FleetSpec{
		ProbePeriod: metav1.Duration{Duration: time.Second}, ProbeTimeout: metav1.Duration{Duration: time.Second},
	})
	startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	waitState(t, f, "a", cm.ClusterStateOnline)
	_, err = mgr.GetCluster(context.Background(), "a")
	require.NoError(t, err)

	// Registering once a cluster is engaged is refused: its group was built.
	require.ErrorContains(t, fleet.ControllerManagedBy(mgr).Named("late").For(&corev1.Pod{}).Complete(got), "after the fleet engaged")

	ctx := context.Background()
	// Filtered out by For's predicate, created first: the informer hands
	// events over in order, so once "cm1" is seen "plain" was judged.
	require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}))
	// Filtered out by WithEventFilter: another namespace.
	other := "fleetb-" + rand.String(6)
	newNamespace(t, cl, other)
	require.NoError(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "cm1", Labels: map[string]string{"watch": "yes"}}}))
	cm1 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm1", Labels: map[string]string{"watch": "yes"}}}
	require.NoError(t, cl.Create(ctx, cm1))
	require.Eventually(t, func() bool { return got.count("a/"+ns+"/cm1") == 1 }, waitFor, 20*time.Millisecond, "For: a/cm1 reconciled")

	// Owns: a Secret controlled by cm1 enqueues cm1.
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: cm1.Name, UID: cm1.UID, Controller: ptr.To(true)}}}}
	require.NoError(t, cl.Create(ctx, owned))
	require.Eventually(t, func() bool { return got.count("a/"+ns+"/cm1") == 2 }, waitFor, 20*time.Millisecond, "Owns: a/cm1 reconciled again")

	// Watches: a ServiceAccount "sa-cm1" maps to cm1.
	require.NoError(t, cl.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-cm1"}}))
	require.Eventually(t, func() bool { return got.count("a/"+ns+"/cm1") == 3 }, waitFor, 20*time.Millisecond, "Watches: a/cm1 reconciled again")

	// WatchesMetadata: a ResourceQuota "rq-cm1" maps to cm1, its handler
	// given the metadata only.
	require.NoError(t, cl.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rq-cm1"}}))
	require.Eventually(t, func() bool { return got.count("a/"+ns+"/cm1") == 4 }, waitFor, 20*time.Millisecond, "WatchesMetadata: a/cm1 reconciled again")
	require.Nil(t, notMetadata.Load(), "WatchesMetadata's handler got whole objects")

	require.Zero(t, got.count("a/"+ns+"/plain"), "For's predicate filtered the unlabelled ConfigMap")
	got.mu.Lock()
	defer got.mu.Unlock()
	require.Equal(t, map[string]int{"a/" + ns + "/cm1": 4}, got.got, "nothing else: the other namespace's cm1 was filtered by WithEventFilter")
}
