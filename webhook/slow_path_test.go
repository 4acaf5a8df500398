package webhook_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/actorkube/controllermanager/supervisor"
	"github.com/actorkube/controllermanager/webhook"
)

// slowPathHook is an admHook whose Path() does not return until released.
type slowPathHook struct {
	*admHook
	release <-chan struct{}
	asked   chan struct{}
	once    sync.Once
}

func (h *slowPathHook) Path() string {
	h.once.Do(func() { close(h.asked) })
	<-h.release
	return h.admHook.Path()
}

// addSlowPathHook adds a webhook at /slow whose Path() hangs until
// release is called (at the latest, at the test's end).
func addSlowPathHook(t *testing.T, f *admFixture) (slow *slowPathHook, release func()) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	slow = &slowPathHook{admHook: newAdmHook("slow", "/slow"), release: ch, asked: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), admWait)
	defer cancel()
	if _, err := f.mgr.Request(ctx, supervisor.AddChild{Runnable: slow}); err != nil {
		t.Fatal(err)
	}
	return slow, release
}

// A request to a webhook served already never waits on another webhook's
// Path(). Found by a hostile read (stop 55): adding a webhook whose Path()
// hangs made the next request to every webhook wait the second the handler
// gives that Path() (pathTimeout), before its own deadline started: with
// ?timeout=1s, answered after the API server had given up. Now the request
// is routed as before, without asking the new webhook anything; the first
// request for an unknown path asks.
func TestAServedWebhookDoesNotWaitForANewWebhooksPath(t *testing.T) {
	good := newAdmHook("good", "/validate")
	f := admServe(t, webhook.Config{}, nil, good)
	v1 := admBody(t, admV1)
	if r := f.post(t, "/validate", v1); r.code != http.StatusOK {
		t.Fatalf("warm-up: %d %s", r.code, r.text)
	}

	slow, release := addSlowPathHook(t, f)

	f.post(t, "/validate?timeout=1s", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	select {
	case <-slow.asked:
		t.Fatal("a request to /validate waited on the new webhook's Path()")
	default:
	}

	release()
	f.post(t, "/slow", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
}
