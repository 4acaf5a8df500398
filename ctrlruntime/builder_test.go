package ctrlruntime_test

// The builder as controller-runtime's own builder tests use it
// (pkg/builder/controller_test.go: "Start with ControllerManagedBy", "Set
// custom predicates", "watching with projections"), on a Manager and on
// controller-runtime's manager, against the shared API server.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// deployment is a Deployment the API server accepts.
func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
}

// replicaSet is a ReplicaSet owned by owners, the first its controller.
func replicaSet(ns, name string, owners ...*appsv1.Deployment) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"rs": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"rs": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	for i, o := range owners {
		rs.OwnerReferences = append(rs.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "Deployment", Name: o.Name, UID: o.UID, Controller: ptr.To(i == 0),
		})
	}
	return rs
}

// reconcileCase is one of controller-runtime's builder tests: a builder on
// mgr whose reconciler is rec, declared for namespace ns.
type reconcileCase struct {
	name  string
	build func(mgr manager.Manager, ns string, rec *recorder) error
	// check runs once the manager runs: by default, controller-runtime's
	// doReconcileTest (the Deployment is reconciled, then again for its
	// ReplicaSet).
	check func(t *testing.T, cl client.Client, ns string, rec *recorder)
}

func inNS(ns string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
}

// doReconcileTest is controller-runtime's: a Deployment is reconciled, and
// reconciled again when a ReplicaSet it controls appears.
func doReconcileTest(t *testing.T, cl client.Client, ns string, rec *recorder) {
	t.Helper()
	ctx := context.Background()
	dep := deployment(ns, "deploy")
	require.NoError(t, cl.Create(ctx, dep))
	require.Eventually(t, func() bool { return rec.saw("deploy") }, time.Minute, 5*time.Millisecond, "the Deployment is reconciled")
	before := rec.count("deploy")
	require.NoError(t, cl.Create(ctx, replicaSet(ns, "rs", dep)))
	require.Eventually(t, func() bool { return rec.count("deploy") > before }, time.Minute, 5*time.Millisecond,
		"the Deployment is reconciled for its ReplicaSet")
}

var builderCases = []reconcileCase{
	{name: "Build adds to the manager, then Watch", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		rec.events = make(chan event.GenericEvent, 1)
		c, err := ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}).Named("deployment-b-" + ns).
			Owns(&appsv1.ReplicaSet{}).WithEventFilter(inNS(ns)).Build(rec)
		if err != nil {
			return err
		}
		// As with controller-runtime's Build, the controller is a
		// controller.Controller a source may be added to before Start.
		var asControllerRuntimes controller.Controller = c
		return asControllerRuntimes.Watch(source.Channel(rec.events, &handler.EnqueueRequestForObject{}))
	}, check: func(t *testing.T, cl client.Client, ns string, rec *recorder) {
		doReconcileTest(t, cl, ns, rec)
		rec.events <- event.GenericEvent{Object: configMap(ns, "watched-after-build")}
		require.Eventually(t, func() bool { return rec.saw("watched-after-build") }, time.Minute, 5*time.Millisecond,
			"a source added with Watch after Build is reconciled")
	}},
	{name: "Owns", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}).Named("deployment-0-" + ns).
			Owns(&appsv1.ReplicaSet{}).WithEventFilter(inNS(ns)).Complete(rec)
	}},
	{name: "Owns MatchEveryOwner", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		onlyDeploy := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == "deploy" }))
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}, onlyDeploy).Named("deployment-1-"+ns).
			Owns(&appsv1.ReplicaSet{}, builder.MatchEveryOwner).WithEventFilter(inNS(ns)).Complete(rec)
	}, check: func(t *testing.T, cl client.Client, ns string, rec *recorder) {
		ctx := context.Background()
		dep, other := deployment(ns, "deploy"), deployment(ns, "other")
		require.NoError(t, cl.Create(ctx, dep))
		require.NoError(t, cl.Create(ctx, other))
		require.Eventually(t, func() bool { return rec.saw("deploy") }, time.Minute, 5*time.Millisecond)
		require.NoError(t, cl.Create(ctx, replicaSet(ns, "rs", dep, other)))
		require.Eventually(t, func() bool { return rec.saw("other") }, time.Minute, 5*time.Millisecond,
			"every owner is reconciled, not only the controller (the For predicate lets only \"deploy\" through)")
	}},
	{name: "Watches", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}).Named("deployment-w-"+ns).
			Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &appsv1.Deployment{}, handler.OnlyControllerOwner())).
			WithEventFilter(inNS(ns)).Complete(rec)
	}},
	{name: "without For", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		return ctrlruntime.NewControllerManagedBy(mgr).Named("Deployment").Named("deployment-2-"+ns).
			Watches(&appsv1.Deployment{}, &handler.EnqueueRequestForObject{}).
			Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &appsv1.Deployment{}, handler.OnlyControllerOwner())).
			WithEventFilter(inNS(ns)).Complete(rec)
	}},
	{name: "predicates", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		deployPrct := predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
			_, ok := e.Object.(*appsv1.Deployment)
			return ok && e.Object.GetNamespace() == ns
		}}
		rsPrct := predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
			_, ok := e.Object.(*appsv1.ReplicaSet)
			return ok && e.Object.GetNamespace() == ns
		}}
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}, builder.WithPredicates(deployPrct)).Named("deployment-3-"+ns).
			Owns(&appsv1.ReplicaSet{}, builder.WithPredicates(rsPrct)).WithEventFilter(inNS(ns)).Complete(rec)
	}},
	{name: "GroupKindConcurrency", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.StatefulSet{}).Named("statefulset-" + ns).
			WithEventFilter(inNS(ns)).Complete(rec)
	}, check: func(t *testing.T, _ client.Client, ns string, _ *recorder) {
		require.Eventually(t, func() bool {
			return gathered(t, ctrlmetrics.Registry, "controller_runtime_max_concurrent_reconciles", "controller", "statefulset-"+ns) == 4
		}, time.Minute, 5*time.Millisecond, "the manager's Controller.GroupKindConcurrency for the For kind")
	}},
	{name: "WithOptions, WithLogConstructor, WatchesRawSource", build: func(mgr manager.Manager, ns string, rec *recorder) error {
		rec.logged = &atomic.Int32{}
		rec.events = make(chan event.GenericEvent, 1)
		logged := rec.logged
		return ctrlruntime.NewControllerManagedBy(mgr).For(&appsv1.Deployment{}).Named("deployment-o-" + ns).
			Owns(&appsv1.ReplicaSet{}).WithEventFilter(inNS(ns)).
			WithOptions(controller.Options{MaxConcurrentReconciles: 3}).
			WithLogConstructor(func(*reconcile.Request) logr.Logger {
				logged.Add(1)
				return logr.Discard()
			}).
			WatchesRawSource(source.Channel(rec.events, &handler.EnqueueRequestForObject{})).
			Complete(rec)
	}, check: func(t *testing.T, cl client.Client, ns string, rec *recorder) {
		doReconcileTest(t, cl, ns, rec)
		assert.Positive(t, rec.logged.Load(), "the reconciles log through WithLogConstructor's logger")
		assert.Equal(t, 3.0, gathered(t, ctrlmetrics.Registry, "controller_runtime_max_concurrent_reconciles", "controller", "deployment-o-"+ns), "WithOptions' MaxConcurrentReconciles")
		rec.events <- event.GenericEvent{Object: configMap(ns, "from-a-channel")}
		require.Eventually(t, func() bool { return rec.saw("from-a-channel") }, time.Minute, 5*time.Millisecond, "WatchesRawSource's channel is reconciled")
	}},
}

// Every case of controller-runtime's builder tests, on a Manager and on
// controller-runtime's manager: the same SetupWithManager runs on both.
func TestEnvBuilderAsControllerRuntimesTestsUseIt(t *testing.T) {
	cfg := testenv.Config(t)
	for _, host := range []string{"ctrlruntime", "controller-runtime"} {
		t.Run(host, func(t *testing.T) {
			mgr := newHost(t, host, cfg, manager.Options{Controller: config.Controller{
				GroupKindConcurrency: map[string]int{"StatefulSet.apps": 4},
			}})
			namespaces := make([]string, len(builderCases))
			recs := make([]*recorder, len(builderCases))
			for i, c := range builderCases {
				namespaces[i], recs[i] = namespace(t, mgr.GetClient()), &recorder{}
				require.NoError(t, c.build(mgr, namespaces[i], recs[i]), c.name)
			}
			runHost(t, mgr)
			for i, c := range builderCases {
				t.Run(c.name, func(t *testing.T) {
					check := c.check
					if check == nil {
						check = doReconcileTest
					}
					check(t, mgr.GetClient(), namespaces[i], recs[i])
				})
			}
		})
	}
}

// controller-runtime's "watching with projections": with a cache that
// refuses typed informers, For, Owns and Watches with builder.OnlyMetadata,
// and WatchesMetadata, watch metadata only.
func TestEnvBuilderWatchesMetadataOnly(t *testing.T) {
	cfg := testenv.Config(t)
	for _, host := range []string{"ctrlruntime", "controller-runtime"} {
		t.Run(host, func(t *testing.T) {
			mgr := newHost(t, host, cfg, manager.Options{NewCache: newNonTypedOnlyCache})
			ns := namespace(t, mgr.GetClient())
			rec, mapped := &recorder{}, make(chan *metav1.PartialObjectMetadata, 16)
			toNothing := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				if m, ok := o.(*metav1.PartialObjectMetadata); ok && o.GetNamespace() == ns {
					mapped <- m
				}
				return nil
			})
			require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).
				For(&appsv1.Deployment{}, builder.OnlyMetadata).Named("deployment-6-"+ns).
				Owns(&appsv1.ReplicaSet{}, builder.OnlyMetadata).
				Watches(&appsv1.StatefulSet{}, toNothing, builder.OnlyMetadata).
				WatchesMetadata(&corev1.ConfigMap{}, toNothing).
				WithEventFilter(inNS(ns)).
				Complete(rec))
			runHost(t, mgr)
			doReconcileTest(t, mgr.GetClient(), ns, rec)
			require.NoError(t, mgr.GetClient().Create(context.Background(), configMap(ns, "meta")))
			select {
			case m := <-mapped:
				assert.Equal(t, "meta", m.Name)
				assert.Equal(t, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, m.GroupVersionKind())
			case <-time.After(time.Minute):
				t.Fatal("WatchesMetadata's handler saw nothing within a minute")
			}
		})
	}
}

// A builder on controller-runtime's manager fails as
// ctrl.NewControllerManagedBy does, with the same error.
func TestBuilderOnAnotherManagerFailsAsControllerRuntimes(t *testing.T) {
	// Both builders name their controller before they fail: names are not
	// validated, so that the second fails as the first did.
	mgr, err := ctrl.NewManager(testConfigWithoutServer(), manager.Options{Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	for _, tt := range []struct {
		name  string
		ours  func() error
		yours func() error
	}{
		{"Owns without For",
			func() error {
				return ctrlruntime.NewControllerManagedBy(mgr).Named("x").Owns(&corev1.ConfigMap{}).Complete(&recorder{})
			},
			func() error {
				return ctrl.NewControllerManagedBy(mgr).Named("x").Owns(&corev1.ConfigMap{}).Complete(&recorder{})
			}},
		{"For twice",
			func() error {
				return ctrlruntime.NewControllerManagedBy(mgr).For(&corev1.Pod{}).For(&corev1.Secret{}).Complete(&recorder{})
			},
			func() error {
				return ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).For(&corev1.Secret{}).Complete(&recorder{})
			}},
		{"nothing watched",
			func() error { return ctrlruntime.NewControllerManagedBy(mgr).Named("y").Complete(&recorder{}) },
			func() error { return ctrl.NewControllerManagedBy(mgr).Named("y").Complete(&recorder{}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ours, yours := tt.ours(), tt.yours()
			require.Error(t, yours)
			require.Error(t, ours)
			assert.Equal(t, yours.Error(), ours.Error())
		})
	}
}

// newHost is a manager of kind host ("ctrlruntime": NewManager;
// "controller-runtime": ctrl.NewManager) on cfg, without servers.
func newHost(t *testing.T, host string, cfg *rest.Config, opts manager.Options) manager.Manager {
	t.Helper()
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.Controller.SkipNameValidation = ptr.To(true)
	var mgr manager.Manager
	var err error
	if host == "ctrlruntime" {
		mgr, err = ctrlruntime.NewManager(cfg, opts)
	} else {
		mgr, err = ctrl.NewManager(cfg, opts)
	}
	require.NoError(t, err)
	return mgr
}

// runHost starts mgr until the test ends.
func runHost(t *testing.T, mgr manager.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			assert.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("Start did not return within a minute of its context's end")
		}
	})
}

// newNonTypedOnlyCache is controller-runtime's test cache: it refuses the
// informers of typed objects, so that only metadata watches work.
func newNonTypedOnlyCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	return &nonTypedOnlyCache{Cache: c}, nil
}

type nonTypedOnlyCache struct{ cache.Cache }

func (c *nonTypedOnlyCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return c.Cache.GetInformer(ctx, obj, opts...)
	}
	return nil, fmt.Errorf("did not want to provide an informer for normal type %T", obj)
}

func (c *nonTypedOnlyCache) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	return nil, fmt.Errorf("don't try to sidestep the restriction on informer types by calling GetInformerForKind")
}

// gathered is the value of the sample of family name whose label is
// value, on g; 0 when there is none.
func gathered(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					switch {
					case m.GetCounter() != nil:
						return m.GetCounter().GetValue()
					case m.GetGauge() != nil:
						return m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return 0
}
