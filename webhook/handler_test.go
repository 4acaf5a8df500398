package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
	"github.com/actorkube/controllermanager/webhook"
)

// admWait bounds anything that should happen promptly.
const admWait = 10 * time.Second

var (
	admQuietLogger = slog.New(slog.DiscardHandler)
	admQuiet       = cm.WithLogger(admQuietLogger)
)

// admHook is a Webhook whose calls the test steers.
type admHook struct {
	name, path string

	mu       sync.Mutex
	handle   func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)
	ready    func() bool
	shutdown func(ctx context.Context)

	starts, shutdowns, handled, readies atomic.Int32
}

func newAdmHook(name, path string) *admHook {
	return &admHook{name: name, path: path}
}

func (h *admHook) Name() string { return h.name }
func (h *admHook) Path() string { return h.path }

func (h *admHook) Start(context.Context) error { h.starts.Add(1); return nil }

func (h *admHook) Ready() bool {
	h.readies.Add(1)
	h.mu.Lock()
	fn := h.ready
	h.mu.Unlock()
	return fn == nil || fn()
}

func (h *admHook) Shutdown(ctx context.Context) {
	h.shutdowns.Add(1)
	h.mu.Lock()
	fn := h.shutdown
	h.mu.Unlock()
	if fn != nil {
		fn(ctx)
	}
}

func (h *admHook) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	h.handled.Add(1)
	h.mu.Lock()
	fn := h.handle
	h.mu.Unlock()
	if fn == nil {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
	}
	return fn(ctx, req)
}

func (h *admHook) setHandle(fn func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)) {
	h.mu.Lock()
	h.handle = fn
	h.mu.Unlock()
}

func (h *admHook) setReady(fn func() bool) {
	h.mu.Lock()
	h.ready = fn
	h.mu.Unlock()
}

func (h *admHook) setShutdown(fn func(ctx context.Context)) {
	h.mu.Lock()
	h.shutdown = fn
	h.mu.Unlock()
}

// admEvents records a manager's events and lets a test wait for one.
type admEvents struct {
	mu      sync.Mutex
	events  []cm.Event
	changed chan struct{}
}

func admRecord(m interface{ Subscribe(func(cm.Event)) func() }) *admEvents {
	r := &admEvents{changed: make(chan struct{})}
	m.Subscribe(func(e cm.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	})
	return r
}

func (r *admEvents) count(typ cm.EventType, child string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type == typ && e.Child == child {
			n++
		}
	}
	return n
}

// waitCount waits until at least n events of typ for child have been seen.
func (r *admEvents) waitCount(t *testing.T, typ cm.EventType, child string, n int) {
	t.Helper()
	deadline := time.NewTimer(admWait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if r.count(typ, child) >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("no %d %s events for %q within %s", n, typ, child, admWait)
		}
	}
}

// admFixture is a started manager serving its webhooks over TLS.
type admFixture struct {
	mgr    *cm.ControllerManager
	srv    *httptest.Server
	events *admEvents
}

// admServe starts a ControllerManager (which hosts webhooks, and promotes
// Handler from BaseManager) with hooks, serves it with cfg over TLS, and
// tears both down at the end of the test.
func admServe(t *testing.T, cfg webhook.Config, sup *cm.SupervisionSpec, hooks ...*admHook) *admFixture {
	t.Helper()
	if sup == nil {
		sup = &cm.SupervisionSpec{
			InitialBackoff: metav1.Duration{Duration: time.Millisecond},
			MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
		}
	}
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: sup}, "", admQuiet)
	if err != nil {
		t.Fatal(err)
	}
	f := &admFixture{mgr: mgr, events: admRecord(mgr)}
	for _, h := range hooks {
		mgr.Add(h)
	}
	f.srv = httptest.NewTLSServer(mgr.WebhookHandler(cfg))
	t.Cleanup(func() {
		f.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	if err := mgr.Start(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// admBody is a real AdmissionReview as an API server sends it.
func admBody(t testing.TB, file string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/admission/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	admV1      = "v1-pod-create.json"
	admV1beta1 = "v1beta1-deployment-update.json"
)

// admWithUID returns body with its request.uid replaced.
func admWithUID(t testing.TB, body []byte, uid string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["request"].(map[string]any)["uid"] = uid
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// admReply is an answer of the handler.
type admReply struct {
	code   int
	header http.Header
	text   string // the body
	review admissionv1.AdmissionReview
	raw    map[string]any
}

func (f *admFixture) post(t *testing.T, path string, body []byte) admReply {
	t.Helper()
	return admDo(t, f.srv.Client(), http.MethodPost, f.srv.URL+path, body)
}

func admDo(t *testing.T, client *http.Client, method, url string, body []byte) admReply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := admReply{code: resp.StatusCode, header: resp.Header, text: string(b)}
	if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &r.review); err != nil {
			t.Fatalf("200 with a body that is not a review: %v: %s", err, b)
		}
		if err := json.Unmarshal(b, &r.raw); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// wantReview checks that r is a 200 review answering uid in apiVersion.
func (r admReply) wantReview(t *testing.T, apiVersion, uid string, allowed bool) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("have %d %q, want 200", r.code, r.text)
	}
	if r.raw["apiVersion"] != apiVersion || r.raw["kind"] != "AdmissionReview" {
		t.Errorf("have apiVersion %v kind %v, want %s AdmissionReview", r.raw["apiVersion"], r.raw["kind"], apiVersion)
	}
	if _, has := r.raw["request"]; has {
		t.Errorf("the answer echoes the request: %s", r.text)
	}
	if r.review.Response == nil {
		t.Fatalf("no response: %s", r.text)
	}
	if string(r.review.Response.UID) != uid {
		t.Errorf("have uid %q, want %q", r.review.Response.UID, uid)
	}
	if r.review.Response.Allowed != allowed {
		t.Errorf("have allowed %v, want %v: %s", r.review.Response.Allowed, allowed, r.text)
	}
}

func (r admReply) wantDenial(t *testing.T, apiVersion, uid string, code int32, msg string) {
	t.Helper()
	r.wantReview(t, apiVersion, uid, false)
	st := r.review.Response.Result
	if st == nil || st.Code != code || !strings.Contains(st.Message, msg) {
		t.Errorf("have status %+v, want code %d and a message with %q", st, code, msg)
	}
}

func TestWebhookAnswersReviewsOfBothVersions(t *testing.T) {
	patchType := admissionv1.PatchTypeJSONPatch
	shared := &admissionv1.AdmissionResponse{ // one value for every request: the handler must not write to it
		UID: "not-the-request's", Allowed: true, Patch: []byte(`[{"op":"add","path":"/metadata/labels/seen","value":"yes"}]`),
		PatchType: &patchType, Warnings: []string{"mutated"}, AuditAnnotations: map[string]string{"by": "test"},
	}
	hook := newAdmHook("mutate", "/mutate")
	var seen sync.Map
	hook.setHandle(func(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		seen.Store(string(req.UID), req)
		return shared, nil
	})
	f := admServe(t, webhook.Config{}, nil, hook)

	tests := []struct {
		name, file, apiVersion, uid string
		check                       func(t *testing.T, req *admissionv1.AdmissionRequest)
	}{
		{"v1", admV1, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", func(t *testing.T, req *admissionv1.AdmissionRequest) {
			if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.Namespace != "shop" ||
				req.UserInfo.Username != "system:serviceaccount:kube-system:statefulset-controller" || !bytes.Contains(req.Object.Raw, []byte("nginx-slim")) {
				t.Errorf("the request reached Handle altered: %+v", req)
			}
		}},
		{"v1beta1", admV1beta1, "admission.k8s.io/v1beta1", "0df28fbd-5f5f-11e8-bc74-36e6bb280816", func(t *testing.T, req *admissionv1.AdmissionRequest) {
			if req.Operation != admissionv1.Update || req.SubResource != "scale" || req.RequestKind.Kind != "Scale" ||
				req.DryRun == nil || !*req.DryRun || !bytes.Contains(req.OldObject.Raw, []byte(`"replicas": 3`)) {
				t.Errorf("the request reached Handle altered: %+v", req)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.post(t, "/mutate?timeout=10s", admBody(t, tt.file))
			r.wantReview(t, tt.apiVersion, tt.uid, true)
			if got := r.review.Response; string(got.Patch) != string(shared.Patch) || got.PatchType == nil || *got.PatchType != patchType ||
				!reflect.DeepEqual(got.Warnings, shared.Warnings) || got.AuditAnnotations["by"] != "test" {
				t.Errorf("the response was not passed through: %s", r.text)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("have Content-Type %q", ct)
			}
			req, ok := seen.Load(tt.uid)
			if !ok {
				t.Fatal("Handle did not see the request")
			}
			tt.check(t, req.(*admissionv1.AdmissionRequest))
		})
	}
	if shared.UID != "not-the-request's" {
		t.Errorf("the handler wrote to the webhook's response: uid %q", shared.UID)
	}
}

func TestWebhookRefusesBadInputBeforeHandle(t *testing.T) {
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{MaxBodyBytes: 4096}, nil, hook)
	v1 := admBody(t, admV1)
	review := func(mutate func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(v1, &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, _ := json.Marshal(m)
		return b
	}
	big := review(func(m map[string]any) {
		m["request"].(map[string]any)["object"].(map[string]any)["data"] = strings.Repeat("x", 8192)
	})

	tests := []struct {
		name, method, path string
		body               []byte
		chunked            bool // send without Content-Length
		want               int
		reason             string
	}{
		{"not JSON", "POST", "/validate", []byte("apiVersion: admission.k8s.io/v1\nkind: AdmissionReview"), false, 400, "not an AdmissionReview"},
		{"truncated JSON", "POST", "/validate", v1[:len(v1)/2], false, 400, "not an AdmissionReview"},
		{"JSON of another shape", "POST", "/validate", []byte(`["AdmissionReview"]`), false, 400, "not an AdmissionReview"},
		{"empty body", "POST", "/validate", nil, false, 400, "empty"},
		{"no request", "POST", "/validate", review(func(m map[string]any) { delete(m, "request") }), false, 400, "no request"},
		{"null request", "POST", "/validate", review(func(m map[string]any) { m["request"] = nil }), false, 400, "no request"},
		{"no uid", "POST", "/validate", review(func(m map[string]any) { delete(m["request"].(map[string]any), "uid") }), false, 400, "no uid"},
		{"unknown apiVersion", "POST", "/validate", review(func(m map[string]any) { m["apiVersion"] = "admission.k8s.io/v2" }), false, 400, `unsupported apiVersion "admission.k8s.io/v2"`},
		{"no apiVersion", "POST", "/validate", review(func(m map[string]any) { delete(m, "apiVersion") }), false, 400, `unsupported apiVersion ""`},
		{"another kind", "POST", "/validate", review(func(m map[string]any) { m["kind"] = "ConversionReview" }), false, 400, `unsupported kind "ConversionReview"`},
		{"timeout not a duration", "POST", "/validate?timeout=soon", v1, false, 400, "not a duration"},
		{"timeout below a second", "POST", "/validate?timeout=1ms", v1, false, 400, "less than 1s"},
		{"body over the limit", "POST", "/validate", big, false, 413, "larger than 4096 bytes"},
		{"body over the limit, chunked", "POST", "/validate", big, true, 413, "larger than 4096 bytes"},
		{"GET", "GET", "/validate", nil, false, 405, "method GET not allowed"},
		{"PUT", "PUT", "/validate", v1, false, 405, "method PUT not allowed"},
		{"unknown path", "POST", "/mutate", v1, false, 404, `no webhook is served at "/mutate"`},
		{"path of a webhook, trailing slash", "POST", "/validate/", v1, false, 404, "no webhook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, err := http.NewRequest(tt.method, f.srv.URL+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			text, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(string(text), tt.reason) {
				t.Errorf("have %d %q, want %d with %q", resp.StatusCode, text, tt.want, tt.reason)
			}
			if tt.want == 405 && resp.Header.Get("Allow") != "POST" {
				t.Errorf("405 without Allow: POST")
			}
		})
	}
	if n := hook.handled.Load(); n != 0 {
		t.Errorf("Handle ran %d times for bad input", n)
	}
	// The same handler still serves good input.
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
}

// TestWebhookRefusesBodiesNotDeclaredJSON: the API server declares its
// reviews application/json; anything else is refused with 415 and the
// reason, before Handle, and JSON with parameters is taken.
func TestWebhookRefusesBodiesNotDeclaredJSON(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	for _, tt := range []struct {
		contentType string
		set         bool
		want        int
		reason      string
	}{
		{"", false, 415, `unsupported Content-Type "": want application/json`},
		{"text/plain", true, 415, `unsupported Content-Type "text/plain"`},
		{"application/yaml", true, 415, `unsupported Content-Type "application/yaml"`},
		{"application/json-patch+json", true, 415, "want application/json"},
		{"application/json; charset", true, 415, "want application/json"}, // not a media type
		{"application/json; charset=utf-8", true, 200, ""},
		{"Application/JSON", true, 200, ""},
	} {
		t.Run(tt.contentType, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/validate", bytes.NewReader(v1))
			if err != nil {
				t.Fatal(err)
			}
			if tt.set {
				req.Header.Set("Content-Type", tt.contentType)
			}
			before := hook.handled.Load()
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			text, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(string(text), tt.reason) {
				t.Errorf("have %d %q, want %d with %q", resp.StatusCode, text, tt.want, tt.reason)
			}
			if handled := hook.handled.Load() - before; (tt.want == 200) != (handled == 1) {
				t.Errorf("Handle ran %d times for a %d", handled, tt.want)
			}
		})
	}
}

func TestWebhookNotReady(t *testing.T) {
	v1 := admBody(t, admV1)
	t.Run("Ready false", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		f := admServe(t, webhook.Config{}, nil, hook)
		hook.setReady(func() bool { return false })
		r := f.post(t, "/validate", v1)
		if r.code != 503 || !strings.Contains(r.text, "Ready returned false") || r.header.Get("Retry-After") == "" {
			t.Errorf("have %d %q %v, want 503 saying Ready returned false, with Retry-After", r.code, r.text, r.header)
		}
		hook.setReady(nil)
		f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
		if n := hook.handled.Load(); n != 1 {
			t.Errorf("Handle ran %d times, want 1", n)
		}
	})
	t.Run("Ready hangs", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		f := admServe(t, webhook.Config{ReadyTimeout: 50 * time.Millisecond}, nil, hook)
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		entered := make(chan struct{}, 100)
		hook.setReady(func() bool { entered <- struct{}{}; <-release; return true })
		begin := time.Now()
		var wg sync.WaitGroup
		replies := make([]admReply, 8)
		for i := range replies {
			wg.Go(func() { replies[i] = f.post(t, "/validate?timeout=10s", v1) })
		}
		wg.Wait()
		for _, r := range replies {
			if r.code != 503 || !strings.Contains(r.text, "Ready did not answer within 50ms") {
				t.Errorf("have %d %q, want 503: Ready did not answer", r.code, r.text)
			}
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("answered after %s: the request waited for Ready", took)
		}
		if n := len(entered); n != 1 {
			t.Errorf("%d Ready calls hang, want 1: requests share the call in flight", n)
		}
		if n := hook.handled.Load(); n != 0 {
			t.Errorf("Handle ran %d times", n)
		}
	})
	t.Run("Ready panics", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		f := admServe(t, webhook.Config{}, nil, hook)
		hook.setReady(func() bool { panic("no readiness") })
		r := f.post(t, "/validate", v1)
		if r.code != 503 || !strings.Contains(r.text, "panic in Ready: no readiness") {
			t.Errorf("have %d %q, want 503 naming the panic", r.code, r.text)
		}
		f.events.waitCount(t, cm.ChildFailed, "validate", 1)
	})
}

func TestWebhookHandleFailuresAreDenials(t *testing.T) {
	v1 := admBody(t, admV1)
	const uid = "705ab4f5-6393-11e8-b7cc-42010a800002"
	t.Run("error", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
			return nil, errors.New("cannot reach the policy store")
		})
		f := admServe(t, webhook.Config{FailureThreshold: -1}, nil, hook)
		r := f.post(t, "/validate", v1)
		r.wantDenial(t, "admission.k8s.io/v1", uid, 500, `webhook "validate": Handle: cannot reach the policy store`)
		if r.review.Response.Result.Reason != metav1.StatusReasonInternalError {
			t.Errorf("have reason %q", r.review.Response.Result.Reason)
		}
	})
	t.Run("neither response nor error", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
			return nil, nil
		})
		f := admServe(t, webhook.Config{FailureThreshold: -1}, nil, hook)
		f.post(t, "/validate", admBody(t, admV1beta1)).wantDenial(t, "admission.k8s.io/v1beta1", "0df28fbd-5f5f-11e8-bc74-36e6bb280816", 500, "neither a response nor an error")
	})
	t.Run("panic restarts the webhook", func(t *testing.T) {
		hook := newAdmHook("validate", "/validate")
		var calls atomic.Int32
		hook.setHandle(func(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
			if calls.Add(1) == 1 {
				panic("nil map")
			}
			return &admissionv1.AdmissionResponse{Allowed: true}, nil
		})
		f := admServe(t, webhook.Config{}, nil, hook)
		r := f.post(t, "/validate", v1)
		r.wantDenial(t, "admission.k8s.io/v1", uid, 500, `webhook "validate": panic in Handle: nil map`)
		if strings.Contains(r.text, "goroutine") {
			t.Errorf("the denial carries the stack: %s", r.text)
		}
		f.events.waitCount(t, cm.ChildFailed, "validate", 1)
		f.events.waitCount(t, cm.ChildRestarted, "validate", 1)
		f.events.waitCount(t, cm.ChildStarted, "validate", 2)
		if s, d := hook.starts.Load(), hook.shutdowns.Load(); s != 2 || d != 1 {
			t.Errorf("have %d starts and %d shutdowns, want 2 and 1", s, d)
		}
		f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", uid, true)
	})
}

func TestWebhookRestartsAfterFailuresInARow(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	var fail atomic.Bool
	hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		if fail.Load() {
			return nil, errors.New("policy store down")
		}
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	f := admServe(t, webhook.Config{FailureThreshold: 3}, nil, hook)
	post := func(failing bool) {
		fail.Store(failing)
		r := f.post(t, "/validate", v1)
		if r.code != 200 || r.review.Response.Allowed == failing {
			t.Fatalf("have %d %s", r.code, r.text)
		}
	}
	// Two failures, a success, two failures: never three in a row.
	for _, failing := range []bool{true, true, false, true, true} {
		post(failing)
	}
	if n := f.events.count(cm.ChildFailed, "validate"); n != 0 {
		t.Fatalf("%d ChildFailed events before three failures in a row", n)
	}
	post(true)
	f.events.waitCount(t, cm.ChildFailed, "validate", 1)
	f.events.waitCount(t, cm.ChildRestarted, "validate", 1)
	f.events.waitCount(t, cm.ChildStarted, "validate", 2)
	st, err := f.mgr.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := st.Child("validate"); !strings.Contains(fmt.Sprint(c.LastError), "3 admission calls in a row failed, the last: webhook \"validate\": Handle: policy store down") {
		t.Errorf("have last error %v", c.LastError)
	}
}

func TestWebhookFailingPastTheBudgetEscalates(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		panic("always")
	})
	f := admServe(t, webhook.Config{}, &cm.SupervisionSpec{
		MaxRestarts:    2,
		InitialBackoff: metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:     metav1.Duration{Duration: time.Millisecond},
	}, hook)
	for i := 1; i <= 3; i++ {
		f.events.waitCount(t, cm.ChildStarted, "validate", i)
		f.post(t, "/validate", v1).wantDenial(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", 500, "panic in Handle: always")
		f.events.waitCount(t, cm.ChildFailed, "validate", i)
	}
	f.events.waitCount(t, cm.Escalated, "validate", 1)
	select {
	case <-f.mgr.Done():
	case <-time.After(admWait):
		t.Fatal("the manager did not stop after the escalation")
	}
	var esc *cm.EscalationError
	if !errors.As(f.mgr.Err(), &esc) || esc.Child != "validate" {
		t.Errorf("have %v, want an escalation of the webhook", f.mgr.Err())
	}
	if r := f.post(t, "/validate", v1); r.code != 503 || !strings.Contains(r.text, "manager stopped") {
		t.Errorf("have %d %q after the manager stopped, want 503", r.code, r.text)
	}
}

func TestWebhookSlowerThanTheTimeoutIsDeniedInTime(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	release := make(chan struct{})
	returned := make(chan struct{})
	hook.setHandle(func(ctx context.Context, _ *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		defer close(returned)
		<-release // ignores ctx, as a stuck Handle does
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	f := admServe(t, webhook.Config{}, nil, hook)
	t.Cleanup(func() { close(release); <-returned })

	begin := time.Now()
	r := f.post(t, "/validate?timeout=1s", v1)
	took := time.Since(begin)
	// Answered at its own deadline, 900 ms, 10% before the API server's:
	// the message names it, no earlier by the wall clock, and while Handle
	// still hangs. (A wall-clock upper bound would fail on a busy machine,
	// which can delay any answer.)
	r.wantDenial(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", 504, `webhook "validate" did not answer within 900ms`)
	if r.review.Response.Result.Reason != metav1.StatusReasonTimeout {
		t.Errorf("have reason %q", r.review.Response.Result.Reason)
	}
	if took < 900*time.Millisecond {
		t.Errorf("answered after %s: before its 900ms deadline", took)
	}
	select {
	case <-returned:
		t.Errorf("Handle returned before the answer: the answer waited for it")
	default:
	}
}

func TestWebhookRunsRequestsConcurrentlyUpToTheBound(t *testing.T) {
	const bound = 4
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	entered := make(chan string, bound)
	release := make(chan struct{})
	hook.setHandle(func(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		entered <- string(req.UID)
		<-release
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	f := admServe(t, webhook.Config{MaxInFlight: bound}, nil, hook)

	var wg sync.WaitGroup
	replies := make([]admReply, bound)
	for i := range bound {
		wg.Go(func() {
			replies[i] = f.post(t, "/validate", admWithUID(t, v1, fmt.Sprintf("uid-%d", i)))
		})
	}
	// Every Handle is running at once: the actor does not serialise them.
	for range bound {
		select {
		case <-entered:
		case <-time.After(admWait):
			t.Fatal("the requests do not run concurrently")
		}
	}
	over := f.post(t, "/validate", admWithUID(t, v1, "uid-over"))
	if over.code != 429 || !strings.Contains(over.text, "already serves 4") || over.header.Get("Retry-After") == "" {
		t.Errorf("have %d %q, want 429 with Retry-After", over.code, over.text)
	}
	close(release)
	wg.Wait()
	for i, r := range replies {
		r.wantReview(t, "admission.k8s.io/v1", fmt.Sprintf("uid-%d", i), true)
	}
	if n := hook.handled.Load(); n != bound {
		t.Errorf("Handle ran %d times, want %d", n, bound)
	}
	// The slots are given back.
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
}

func TestWebhookIsUnavailableWhileRestarting(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	inShutdown := make(chan struct{})
	release := make(chan struct{})
	hook.setShutdown(func(context.Context) {
		close(inShutdown)
		<-release
	})
	var calls atomic.Int32
	hook.setHandle(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		if calls.Add(1) == 1 {
			panic("corrupt cache")
		}
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	f := admServe(t, webhook.Config{}, nil, hook)
	f.post(t, "/validate", v1).wantDenial(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", 500, "corrupt cache")
	select {
	case <-inShutdown:
	case <-time.After(admWait):
		t.Fatalf("the failed webhook's Shutdown was not called within %s", admWait)
	}
	hook.setShutdown(nil)
	r := f.post(t, "/validate", v1)
	if r.code != 503 || !strings.Contains(r.text, `webhook "validate" is shutting down`) {
		t.Errorf("have %d %q while restarting, want 503", r.code, r.text)
	}
	close(release)
	f.events.waitCount(t, cm.ChildStarted, "validate", 2)
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if n := calls.Load(); n != 2 {
		t.Errorf("Handle ran %d times, want 2", n)
	}
}

func TestWebhookRoutesFollowAddAndRemove(t *testing.T) {
	v1 := admBody(t, admV1)
	first := newAdmHook("first", "/first")
	f := admServe(t, webhook.Config{}, nil, first)
	if r := f.post(t, "/second", v1); r.code != 404 {
		t.Fatalf("have %d for a path no webhook serves", r.code)
	}
	second := newAdmHook("second", "second") // a path without its slash is served with one
	if err := f.mgr.AddChild(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	f.post(t, "/second", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	dup := newAdmHook("duplicate", "/first")
	if err := f.mgr.AddChild(context.Background(), dup); !errors.Is(err, cm.ErrDuplicatePath) {
		t.Fatalf("AddChild of a second webhook at /first: %v, want ErrDuplicatePath", err)
	}
	// Request is not checked: the handler still serves a shared path with
	// the webhook added first.
	if _, err := f.mgr.Request(context.Background(), supervisor.AddChild{Runnable: dup}); err != nil {
		t.Fatal(err)
	}
	f.post(t, "/first", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if first.handled.Load() != 1 || dup.handled.Load() != 0 {
		t.Errorf("the webhook added first must serve a shared path")
	}
	if err := f.mgr.RemoveChild(context.Background(), "second"); err != nil {
		t.Fatal(err)
	}
	if r := f.post(t, "/second", v1); r.code != 404 {
		t.Errorf("have %d %q after RemoveChild, want 404", r.code, r.text)
	}
	if err := f.mgr.RemoveChild(context.Background(), "first"); err != nil {
		t.Fatal(err)
	}
	f.post(t, "/first", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if dup.handled.Load() != 1 {
		t.Errorf("the duplicate did not take the path over once the first was removed")
	}
}

func TestWebhookStoppedByStopChildIsUnavailable(t *testing.T) {
	v1 := admBody(t, admV1)
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	if _, err := f.mgr.Request(context.Background(), supervisor.StopChild{Name: "validate"}); err != nil {
		t.Fatal(err)
	}
	if r := f.post(t, "/validate", v1); r.code != 503 || !strings.Contains(r.text, "not running") {
		t.Errorf("have %d %q for a stopped webhook, want 503", r.code, r.text)
	}
}

func TestWebhookHandlerBeforeStartAndAfterStop(t *testing.T) {
	v1 := admBody(t, admV1)
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet)
	mgr.Add(newAdmHook("validate", "/validate"))
	srv := httptest.NewTLSServer(mgr.Handler())
	defer srv.Close()
	if r := admDo(t, srv.Client(), "POST", srv.URL+"/validate", v1); r.code != 503 || !strings.Contains(r.text, "not started") {
		t.Errorf("have %d %q before Start, want 503", r.code, r.text)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	admDo(t, srv.Client(), "POST", srv.URL+"/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	mgr.ShutdownAndWait(context.Background())
	if r := admDo(t, srv.Client(), "POST", srv.URL+"/validate", v1); r.code != 503 || !strings.Contains(r.text, "manager stopped") {
		t.Errorf("have %d %q after ShutdownAndWait, want 503", r.code, r.text)
	}
}

// TestAdmissionReviewV1beta1DecodesAsV1 checks what lets the handler decode
// both apiVersions into the v1 types: v1beta1's types have the same fields,
// with the same JSON names and the same shapes.
func TestAdmissionReviewV1beta1DecodesAsV1(t *testing.T) {
	var compare func(path string, v1, v1beta1 reflect.Type)
	compare = func(path string, a, b reflect.Type) {
		if a.Kind() != b.Kind() {
			t.Errorf("%s: v1 is a %s, v1beta1 a %s", path, a.Kind(), b.Kind())
			return
		}
		switch a.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			compare(path+"[]", a.Elem(), b.Elem())
		case reflect.Struct:
			if a.PkgPath() != b.PkgPath() && a.NumField() != b.NumField() {
				t.Errorf("%s: v1 has %d fields, v1beta1 %d", path, a.NumField(), b.NumField())
				return
			}
			if a == b {
				return
			}
			for i := range a.NumField() {
				fa, fb := a.Field(i), b.Field(i)
				if fa.Name != fb.Name || fa.Tag.Get("json") != fb.Tag.Get("json") {
					t.Errorf("%s: field %d is %s `json:%q` in v1, %s `json:%q` in v1beta1", path, i, fa.Name, fa.Tag.Get("json"), fb.Name, fb.Tag.Get("json"))
					continue
				}
				compare(path+"."+fa.Name, fa.Type, fb.Type)
			}
		}
	}
	compare("AdmissionReview", reflect.TypeFor[admissionv1.AdmissionReview](), reflect.TypeFor[admissionv1beta1.AdmissionReview]())

	// And a v1beta1 review decodes into v1 as into v1beta1.
	body := admBody(t, admV1beta1)
	var asV1 admissionv1.AdmissionReview
	var asV1beta1 admissionv1beta1.AdmissionReview
	if err := json.Unmarshal(body, &asV1); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &asV1beta1); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(asV1)
	b, _ := json.Marshal(asV1beta1)
	if !bytes.Equal(a, b) {
		t.Errorf("v1beta1 decoded as v1 differs:\n%s\n%s", a, b)
	}
	if asV1.Request.UID != types.UID("0df28fbd-5f5f-11e8-bc74-36e6bb280816") {
		t.Errorf("have uid %q", asV1.Request.UID)
	}
}
