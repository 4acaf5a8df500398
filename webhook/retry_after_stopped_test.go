package webhook_test

import (
	"context"
	"net/http/httptest"
	"testing"

	cm "github.com/actorkube/controllermanager"
)

// A request before Start, or after the manager has stopped, is answered
// 503 with Retry-After: 1 (docs/webhooks.md, Status codes), so that the
// API server calls again, as it does for the other 503s.
func TestWebhookRetryAfterWhenManagerNotRunning(t *testing.T) {
	v1 := admBody(t, admV1)
	mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet)
	mgr.Add(newAdmHook("validate", "/validate"))
	srv := httptest.NewTLSServer(mgr.Handler())
	defer srv.Close()
	check := func(when string) {
		t.Helper()
		r := admDo(t, srv.Client(), "POST", srv.URL+"/validate", v1)
		if r.code != 503 || r.header.Get("Retry-After") != "1" {
			t.Errorf("%s: %d %q, Retry-After %q; want 503 with Retry-After 1", when, r.code, r.text, r.header.Get("Retry-After"))
		}
	}
	check("before Start")
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), admWait)
	defer cancel()
	mgr.ShutdownAndWait(ctx)
	check("after ShutdownAndWait")
}
