package ctrlruntime_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// convertAPIVersion is a ConversionReview handler for versions of one
// schema: it rewrites apiVersion only.
func convertAPIVersion(w http.ResponseWriter, r *http.Request) {
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad ConversionReview", http.StatusBadRequest)
		return
	}
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.SetAPIVersion(review.Request.DesiredAPIVersion)
		b, err := u.MarshalJSON()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// A kubebuilder multi-version project: Widget stored as v2, a controller
// for v1, the manager's webhook server serving the conversion webhook.
// The v1 informer syncs only once the webhook is served, so the webhook
// server must start before the caches' pre-flight, as under
// controller-runtime; started after it, the manager never elects itself
// and the controller never reconciles.
func TestEnvManagerServesConversionWebhookBeforeCachesSync(t *testing.T) {
	cfg := testenv.Config(t)
	wio := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	require.NoError(t, wio.PrepWithoutInstalling())
	t.Cleanup(func() { _ = wio.Cleanup() })

	group := "conv" + rand.String(6) + ".example.com"
	url := "https://" + net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)) + "/convert"
	anything := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", XPreserveUnknownFields: ptr.To(true)}}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: false, Schema: anything},
				{Name: "v2", Served: true, Storage: true, Schema: anything},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: wio.LocalServingCAData},
				},
			},
		},
	}
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}})
	require.NoError(t, err)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = direct.Delete(context.Background(), crd) })
	ns := namespace(t, direct)
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v2", Kind: "Widget"})
	stored.SetNamespace(ns)
	stored.SetName("w1")
	require.NoError(t, direct.Create(context.Background(), stored))

	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	require.NoError(t, err)
	mgr.GetWebhookServer().Register("/convert", http.HandlerFunc(convertAPIVersion))
	reconciled := make(chan string, 1)
	v1 := &unstructured.Unstructured{}
	v1.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Widget"})
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("widget-"+rand.String(6)).For(v1).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			select {
			case reconciled <- req.Name:
			default:
			}
			return reconcile.Result{}, nil
		})))
	startManager(t, mgr)

	select {
	case name := <-reconciled:
		require.Equal(t, "w1", name)
	case <-time.After(30 * time.Second):
		t.Fatalf("no reconcile of the v2-stored Widget through its v1 informer within 30s (elected: %v): "+
			"the conversion webhook the caches need was not served", isClosed(mgr.Elected()))
	}
}

// cert-controller's pattern (JobSet's, Kueue's main.go): the webhooks are
// registered by a goroutine once the certificates are ready, after Start,
// so GetWebhookServer is first called then. The server starts at that
// call, as controller-runtime's Add after Start starts it, and serves.
func TestEnvManagerServesWebhookServerFirstUsedAfterStart(t *testing.T) {
	cfg := testenv.Config(t)
	wio := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	require.NoError(t, wio.PrepWithoutInstalling())
	t.Cleanup(func() { _ = wio.Cleanup() })
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	require.NoError(t, err)
	startManager(t, mgr)
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("not elected within 30s")
	}

	mgr.GetWebhookServer().Register("/validate-late", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(wio.LocalServingCAData))
	cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(cl.CloseIdleConnections)
	url := "https://" + net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort)) + "/validate-late"
	require.Eventually(t, func() bool {
		resp, err := cl.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusTeapot
	}, 10*time.Second, 10*time.Millisecond, "the webhook server, first used after Start, serves its handler")
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
