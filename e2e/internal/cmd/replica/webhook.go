package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// policyWebhook is a validating webhook that admits every object but those annotated
// with journal.DenyAnnotation, and panics on those annotated with
// journal.PanicAnnotation.
type policyWebhook struct {
	name, path, identity string
	rec                  *journal.Writer
	ready                atomic.Bool
}

func newPolicyWebhook(name, path, identity string, rec *journal.Writer) *policyWebhook {
	return &policyWebhook{name: name, path: path, identity: identity, rec: rec}
}

func (w *policyWebhook) Name() string { return w.name }
func (w *policyWebhook) Path() string { return w.path }
func (w *policyWebhook) Ready() bool  { return w.ready.Load() }

func (w *policyWebhook) Start(context.Context) error {
	w.ready.Store(true)
	w.rec.Write(journal.Entry{Kind: journal.WebhookStarted, Child: w.name})
	return nil
}

func (w *policyWebhook) Shutdown(context.Context) {
	w.ready.Store(false)
	w.rec.Write(journal.Entry{Kind: journal.WebhookStopped, Child: w.name})
}

func (w *policyWebhook) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	entry := journal.Entry{
		Kind: journal.Admission, Child: w.name,
		Operation: string(req.Operation), Namespace: req.Namespace, Name: req.Name,
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		entry.Err = err.Error()
		w.rec.Write(entry)
		return nil, fmt.Errorf("cannot decode the object: %w", err)
	}
	if _, ok := obj.Annotations[journal.PanicAnnotation]; ok {
		entry.Kind = journal.AdmissionPanic
		w.rec.Write(entry)
		panic(fmt.Sprintf("%s: asked to panic by %s/%s", w.name, req.Namespace, req.Name))
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if reason, ok := obj.Annotations[journal.DenyAnnotation]; ok {
		resp.Allowed = false
		resp.Result = &metav1.Status{
			Code:    403,
			Reason:  metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("denied by %s on %s: %s", w.name, w.identity, reason),
		}
		entry.Message = resp.Result.Message
	}
	entry.Allowed = resp.Allowed
	w.rec.Write(entry)
	return resp, nil
}
