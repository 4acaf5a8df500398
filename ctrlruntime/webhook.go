package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cm "github.com/actorkube/controllermanager"
)

// Webhook serves a controller-runtime admission.Handler (an
// *admission.Webhook, admission.WithCustomDefaulter, WithCustomValidator,
// or a handler of your own) as a controllermanager.Webhook, routed by a
// WebhookManager's (or ControllerManager's) Handler at Path. The
// manager's admission server decodes the AdmissionReview, bounds the body,
// the time and the calls in flight, and turns a panic into a failure of
// this webhook; the handler sees the request in its context
// (admission.RequestFromContext), as under controller-runtime's server.
type Webhook struct {
	name, path string
	handler    admission.Handler
	ready      atomic.Bool
}

var _ cm.Webhook = (*Webhook)(nil)

// NewWebhook serves h at path under name (unique in its manager).
func NewWebhook(name, path string, h admission.Handler) (*Webhook, error) {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if path == "" || path[0] != '/' {
		errs = append(errs, fmt.Errorf("path %q does not start with /", path))
	}
	if h == nil {
		errs = append(errs, errors.New("handler is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: webhook %q: %w", name, err)
	}
	return &Webhook{name: name, path: path, handler: h}, nil
}

// Name is the webhook's name in the manager.
func (w *Webhook) Name() string { return w.name }

// Path is where the manager's Handler routes the webhook's requests.
func (w *Webhook) Path() string { return w.path }

// Start makes the webhook ready: an admission.Handler needs no start.
func (w *Webhook) Start(context.Context) error {
	w.ready.Store(true)
	return nil
}

// Ready is true from Start to Shutdown.
func (w *Webhook) Ready() bool { return w.ready.Load() }

// Shutdown makes the webhook not ready.
func (w *Webhook) Shutdown(context.Context) { w.ready.Store(false) }

// Handle answers one request with the handler's response, completed as
// controller-runtime's server completes it (the request's UID, a status
// code, the patch type of a patch).
func (w *Webhook) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("ctrlruntime: webhook %q: nil request", w.name)
	}
	r := admission.Request{AdmissionRequest: *req}
	resp := w.handler.Handle(admission.NewContextWithRequest(ctx, r), r)
	if err := resp.Complete(r); err != nil {
		return nil, fmt.Errorf("ctrlruntime: webhook %q: %w", w.name, err)
	}
	return &resp.AdmissionResponse, nil
}
