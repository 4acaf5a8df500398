package webhook_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Ready that hung in one incarnation kept the gate's call in flight
// across RestartChild: every request to the new incarnation (whose Ready
// answers true at once) joined it, waited ReadyTimeout and was refused 503,
// for good, and the liveness probe (which calls Ready itself) saw nothing
// wrong. Found by a hostile read (issue 35's review). Each incarnation now
// has its own call. ReadyTimeout is long enough that only the hung Ready
// reaches it on a loaded machine.
func TestAReadyThatHungDoesNotOutliveARestart(t *testing.T) {
	body := admBody(t, admV1)
	hook := newAdmHook("rdy", "/rdy")
	var armed atomic.Bool
	release := make(chan struct{})
	hook.setReady(func() bool {
		if armed.CompareAndSwap(true, false) {
			<-release
		}
		return true
	})
	sup := &cm.SupervisionSpec{
		InitialBackoff: metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
		HealthInterval: metav1.Duration{Duration: time.Hour}, // keep the probe out of it
	}
	f := admServe(t, webhook.Config{ReadyTimeout: 3 * time.Second}, sup, hook)
	t.Cleanup(func() { close(release) })

	f.post(t, "/rdy", body).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	armed.Store(true)
	if r := f.post(t, "/rdy", body); r.code != 503 {
		t.Fatalf("have %d %q, want 503 while Ready hangs", r.code, r.text)
	}
	if err := f.mgr.RestartChild(context.Background(), "rdy"); err != nil {
		t.Fatal(err)
	}
	if hook.starts.Load() != 2 {
		t.Fatalf("starts = %d, want 2", hook.starts.Load())
	}
	for i := 0; i < 3; i++ {
		r := f.post(t, "/rdy", body)
		if r.code != 200 {
			t.Errorf("after restart, request %d: have %d %q, want 200 (Ready now answers true at once)", i, r.code, r.text)
		}
	}
}
