package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/actorkube/controllermanager/webhook"
)

// gatedBody is a request body whose first Read, which the transport makes
// only once the server has sent 100 Continue (the handler has routed the
// request and begun reading its body), signals first and waits for
// release.
type gatedBody struct {
	r       io.Reader
	once    sync.Once
	first   chan struct{}
	release chan struct{}
}

func (b *gatedBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		close(b.first)
		<-b.release
	})
	return b.r.Read(p)
}

// A webhook removed after its request was routed, before the request
// reached its actor: the call goes to an actor that has stopped, and
// nothing answers it. Found by a hostile read (stop 54, hole 15): the
// handler waited 90% of the request's timeout and answered 200 with
// allowed false (code 504), a denial that skips the API server's
// failurePolicy. It is answered 503 with Retry-After, as a stopped
// webhook is, at once.
func TestAWebhookRemovedWhileItsRequestIsReadIsAnswered503(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("gone", "/gone")
	f := admServe(t, webhook.Config{}, nil, hook)

	tr := f.srv.Client().Transport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = time.Hour // the body goes only after 100 Continue
	defer tr.CloseIdleConnections()
	body := &gatedBody{r: bytes.NewReader(v1), first: make(chan struct{}), release: make(chan struct{})}
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/gone?timeout=5s", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(v1))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")

	type result struct {
		code  int
		retry string
		text  string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{code: resp.StatusCode, retry: resp.Header.Get("Retry-After"), text: string(b), err: err}
	}()

	select {
	case <-body.first: // routed, its body being read
	case r := <-done:
		t.Fatalf("answered before its body was read: %+v", r)
	case <-time.After(admWait):
		t.Fatal("the server never asked for the body")
	}
	if err := f.mgr.RemoveChild(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	close(body.release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.code != http.StatusServiceUnavailable || r.retry != "1" {
		t.Fatalf("have %d (Retry-After %q) %q, want 503 with Retry-After 1", r.code, r.retry, r.text)
	}
	if n := hook.handled.Load(); n != 0 {
		t.Errorf("Handle ran %d times on a removed webhook", n)
	}
}

// A ?timeout= of more seconds than a Duration holds is the longest
// timeout, not an overflow: before, 9223372037 seconds wrapped negative
// and the request was refused 400 "less than 1s".
func TestATimeoutPastADurationIsTheLongest(t *testing.T) {
	v1 := admBody(t, admV1)
	f := admServe(t, webhook.Config{}, nil, newAdmHook("validate", "/validate"))
	for _, q := range []string{"9223372037", "99999999999999999"} {
		f.post(t, "/validate?timeout="+q, v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	}
}

// A webhook removed while its Handle runs: the call was taken, and is
// answered as Handle says. Found by the chaos test (stop 55): the first
// version of the fix above answered 503 as soon as the webhook left the
// table, though its Handle ran and answered.
func TestAWebhookRemovedWhileItsHandleRunsAnswersAsHandleSays(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("busy", "/busy")
	entered, release := make(chan struct{}), make(chan struct{})
	hook.setHandle(func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		close(entered)
		<-release
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
	})
	f := admServe(t, webhook.Config{}, nil, hook)
	done := make(chan admReply, 1)
	go func() { done <- f.post(t, "/busy?timeout=20s", v1) }()
	select {
	case <-entered:
	case <-time.After(admWait):
		t.Fatal("Handle never ran")
	}
	// The removal drains the running Handle before the webhook's Shutdown
	// (docs/webhooks.md, "Stops and restarts"): it waits until Handle is
	// released, not for its bound (half the default ShutdownTimeout, 15s).
	removed := make(chan error, 1)
	go func() { removed <- f.mgr.RemoveChild(context.Background(), "busy") }()
	deadline := time.Now().Add(admWait)
	for {
		st, err := f.mgr.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := st.Child("busy"); ok && c.State == "Stopping" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook never began to stop")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
	select {
	case err := <-removed:
		t.Fatalf("RemoveChild returned (%v) while the Handle it drains still ran", err)
	default:
	}
	close(release)
	r := <-done
	r.wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
}
