package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"syscall"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// noLatestTag is a validating webhook that denies pods whose images float on
// the ":latest" tag.
type noLatestTag struct{}

func (noLatestTag) Name() string                    { return "no-latest-tag" }
func (noLatestTag) Path() string                    { return "/validate-pods" }
func (noLatestTag) Start(ctx context.Context) error { return nil }
func (noLatestTag) Ready() bool                     { return true }
func (noLatestTag) Shutdown(ctx context.Context)    {}

func (noLatestTag) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, fmt.Errorf("cannot decode the pod: %w", err)
	}
	for _, c := range pod.Spec.Containers {
		if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
			return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
				Code: http.StatusForbidden, Message: fmt.Sprintf("container %q: pin the image's tag", c.Name),
			}}, nil
		}
	}
	return &admissionv1.AdmissionResponse{Allowed: true}, nil
}

// A WebhookManager serves its webhooks' admission requests with Handler:
// each request runs the webhook's Handle in a goroutine of the webhook's
// actor, supervised like a controller. Here an httptest server stands in
// for the API server's calls.
func Example_handler() {
	mgr := cm.NewWebhookManager(cm.NewContext(nil))
	mgr.Add(noLatestTag{})
	if err := mgr.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer mgr.ShutdownAndWait(context.Background())

	srv := httptest.NewTLSServer(mgr.Handler())
	defer srv.Close()

	review := `{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
		"uid": "d2f6a1c4-5b1e-4c3b-9f7a-0e8d6c5b4a39", "operation": "CREATE",
		"kind": {"version": "v1", "kind": "Pod"}, "resource": {"version": "v1", "resource": "pods"},
		"userInfo": {"username": "alice"},
		"object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
			"spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}}}`
	resp, err := srv.Client().Post(srv.URL+"/validate-pods?timeout=10s", "application/json", strings.NewReader(review))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, answer.APIVersion, answer.Kind)
	fmt.Println(answer.Response.UID, answer.Response.Allowed, answer.Response.Result.Message)
	// Output:
	// 200 admission.k8s.io/v1 AdmissionReview
	// d2f6a1c4-5b1e-4c3b-9f7a-0e8d6c5b4a39 false container "nginx": pin the image's tag
}

// A webhook service serves its manager's webhooks over HTTPS with the
// certificate cert-manager keeps in a mounted Secret; a rotated certificate
// is picked up without a restart. The probes share the port.
func ExampleServer() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mgr := cm.NewWebhookManager(cm.NewContext(nil))
	mgr.Add(noLatestTag{})
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer mgr.ShutdownAndWait(context.Background())

	srv, err := webhook.NewServer(webhook.ServerConfig{
		Addr:     ":9443",
		CertFile: "/tmp/k8s-webhook-server/serving-certs/tls.crt",
		KeyFile:  "/tmp/k8s-webhook-server/serving-certs/tls.key",
		Handler:  mgr.Handler(),
		// Probes: health.NewHandler(mgr),
	})
	if err != nil {
		log.Fatal(err)
	}
	// Serves until SIGTERM, then drains the requests in flight.
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
