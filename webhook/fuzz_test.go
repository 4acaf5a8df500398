package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// FuzzAdmissionReview posts arbitrary bodies and ?timeout= values to a
// webhook: the handler never panics, never answers 5xx (bad input is the
// client's fault, and a good review reaches a Handle that answers), and
// answers a 200 only with a review of the request's apiVersion that carries
// its uid. The seed corpus is in testdata/fuzz/FuzzAdmissionReview.
func FuzzAdmissionReview(f *testing.F) {
	for _, file := range []string{admV1, admV1beta1} {
		f.Add(admBody(f, file), "10s")
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`), "")

	hook := newAdmHook("validate", "/validate")
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet)
	mgr.Add(hook)
	if err := mgr.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	handler := mgr.WebhookHandler(webhook.Config{MaxBodyBytes: 64 << 10, FailureThreshold: -1})

	f.Fuzz(func(t *testing.T, body []byte, timeout string) {
		target := "/validate"
		if timeout != "" {
			target += "?timeout=" + url.QueryEscape(timeout)
		}
		req := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("have %d %q for %q", rec.Code, rec.Body, body)
		}
		if rec.Code != http.StatusOK {
			return
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("200 for a body that is not a review: %q", body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("200 with a body that is not a review: %v: %q", err, rec.Body)
		}
		if out.APIVersion != in.APIVersion || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != in.Request.UID {
			t.Fatalf("have %q for %q", rec.Body, body)
		}
		// A denial here can only be a timeout: this Handle allows all.
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Code != http.StatusGatewayTimeout) {
			t.Fatalf("have a denial %q for %q", rec.Body, body)
		}
	})
}
