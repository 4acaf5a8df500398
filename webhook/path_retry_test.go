package webhook_test

import (
	"net/http"
	"testing"

	"github.com/actorkube/controllermanager/webhook"
)

// A webhook whose Path() did not return within the handler's wait is
// asked again by a later request, rather than left unserved until the
// webhooks change. Found by a read: a Path() that timed out once was
// recorded as "", and its webhook answered 404 for as long as the table
// of webhooks stayed the same, though its Path() returned a moment later.
func TestAWebhookWhosePathTimedOutIsServedOnceItReturns(t *testing.T) {
	f := admServe(t, webhook.Config{}, nil, newAdmHook("good", "/validate"))
	v1 := admBody(t, admV1)

	_, release := addSlowPathHook(t, f)

	// The first request waits the handler's bound on Path(), then finds
	// no webhook at /slow.
	if r := f.post(t, "/slow", v1); r.code != http.StatusNotFound {
		t.Fatalf("while Path() hangs: %d %s, want 404", r.code, r.text)
	}
	release() // Path() returns "/slow" now
	f.post(t, "/slow", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
}
