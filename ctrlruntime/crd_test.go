package ctrlruntime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// gadgetCRD is a namespaced CRD of a group of its own: nothing maps its
// kind until it is installed.
func gadgetCRD(group string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// A manager started before the CRD of a kind it reconciles is established
// (JobSet's and Kueue's deployments apply the CRDs and the Deployment
// together): under controller-runtime the manager runs, the other
// controllers reconcile, and the controller of the missing kind retries
// its informer (its Kind source polls every 10s, within CacheSyncTimeout)
// and reconciles once the CRD is there. Both managers must do that.
func TestEnvManagerStartsBeforeItsCRDIsEstablished(t *testing.T) {
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	for _, host := range []string{"controller-runtime", "ctrlruntime"} {
		t.Run(host, func(t *testing.T) {
			group := "late" + rand.String(6) + ".example.com"
			gvk := schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Gadget"}
			ns := namespace(t, direct)
			mgr := newHost(t, host, cfg, manager.Options{})
			gadget := &unstructured.Unstructured{}
			gadget.SetGroupVersionKind(gvk)
			gadgets := make(chan string, 1)
			require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("gadget-"+rand.String(6)).For(gadget).
				Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
					select {
					case gadgets <- req.Name:
					default:
					}
					return reconcile.Result{}, nil
				})))
			steady := &recorder{}
			require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("steady-"+rand.String(6)).
				For(&corev1.ConfigMap{}, builder.WithPredicates(inNS(ns))).Complete(steady))

			ctx, cancel := context.WithCancel(context.Background())
			var startErr error
			stopped := make(chan struct{})
			go func() { defer close(stopped); startErr = mgr.Start(ctx) }()
			t.Cleanup(func() {
				cancel()
				select {
				case <-stopped:
				case <-time.After(time.Minute):
					t.Error("Start did not return within a minute of its context's end")
				}
			})
			// The manager runs the other controllers while the kind is
			// unknown.
			require.NoError(t, direct.Create(context.Background(), configMap(ns, "c")))
			deadline := time.After(30 * time.Second)
			for !steady.saw("c") {
				select {
				case <-stopped:
					t.Fatalf("Start returned before the CRD was installed: %v", startErr)
				case <-deadline:
					t.Fatal("the other controller did not reconcile within 30s of Start")
				case <-time.After(5 * time.Millisecond):
				}
			}

			installed := time.Now()
			crd := gadgetCRD(group)
			_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = direct.Delete(context.Background(), crd) })
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			obj.SetNamespace(ns)
			obj.SetName("g1")
			require.NoError(t, direct.Create(context.Background(), obj))
			select {
			case name := <-gadgets:
				require.Equal(t, "g1", name)
				t.Logf("FIGURE %s: the Gadget reconciled %v after its CRD was installed", host, time.Since(installed).Round(time.Millisecond))
			case <-stopped:
				t.Fatalf("Start returned: %v", startErr)
			case <-time.After(time.Minute):
				t.Fatal("the Gadget was not reconciled within a minute of its CRD")
			}
		})
	}
}

// A CRD not established within the controller's CacheSyncTimeout: under
// controller-runtime the controller's start fails ("timed out waiting for
// cache to be synced") and Start returns that error. So does ours: a
// deployment whose CRD never comes fails as it would have.
func TestEnvCRDLaterThanCacheSyncTimeoutFailsStart(t *testing.T) {
	cfg := testenv.Config(t)
	for _, host := range []string{"controller-runtime", "ctrlruntime"} {
		t.Run(host, func(t *testing.T) {
			gadget := &unstructured.Unstructured{}
			gadget.SetGroupVersionKind(schema.GroupVersionKind{Group: "never" + rand.String(6) + ".example.com", Version: "v1", Kind: "Gadget"})
			mgr := newHost(t, host, cfg, manager.Options{})
			require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("gadget-"+rand.String(6)).For(gadget).
				WithOptions(controller.Options{CacheSyncTimeout: time.Second}).
				Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
					return reconcile.Result{}, nil
				})))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := mgr.Start(ctx)
			require.ErrorContains(t, err, "timed out waiting for cache to be synced")
			require.NoError(t, ctx.Err(), "Start returned for the timeout, not for its context")
		})
	}
}
