package webhook_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// RestartChild of a webhook called its Shutdown while a Handle of the
// incarnation it ends still ran, its answer still awaited: a webhook whose
// Shutdown frees what Handle uses broke that call. Found by a review (only
// ShutdownAndWait drained). The restart's Shutdown now waits for such
// calls, within the stop's bound, and the call is answered as it says.
func TestRestartChildDrainsHandleInFlight(t *testing.T) {
	v1 := admBody(t, admV1)
	h := newBlockedHook()
	f := admServe(t, webhook.Config{}, nil, h.admHook)
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	replies := make(chan admReply, 1)
	go func() { replies <- admDo(t, f.srv.Client(), "POST", f.srv.URL+"/validate?timeout=30s", v1) }()
	<-h.entered

	restarted := make(chan error, 1)
	go func() { restarted <- f.mgr.RestartChild(context.Background(), "validate") }()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(admWait)
	defer deadline.Stop()
wait:
	for {
		select {
		case <-h.shutdownCalled:
			t.Fatal("the restart called the webhook's Shutdown while its Handle ran")
		case err := <-restarted:
			t.Fatalf("RestartChild returned (%v) while a Handle call of the old incarnation ran", err)
		case <-deadline.C:
			t.Fatal("the restart never waited for the Handle call")
		case <-poll.C:
			if goroutineIn("childactor.drainAdmissions") {
				break wait
			}
		}
	}
	close(h.release)
	released = true
	if err := <-restarted; err != nil {
		t.Fatalf("RestartChild: %v", err)
	}
	if h.besideHandle.Load() {
		t.Error("the restart's Shutdown ran beside the Handle")
	}
	if r := <-replies; r.code != 200 || r.review.Response == nil || !r.review.Response.Allowed {
		t.Errorf("the Handle call that ran was answered %d %q, want its own answer", r.code, r.text)
	}
	if n := h.starts.Load(); n != 2 {
		t.Errorf("Start called %d times, want 2", n)
	}
}

// The wait is bounded: a Handle that hangs with its request still live
// holds a restart no longer than part of ShutdownTimeout, after which
// Shutdown runs and the webhook starts again (the restart does not turn
// into an overdue Shutdown, which would escalate).
func TestRestartChildDrainIsBoundedByTheShutdownTimeout(t *testing.T) {
	v1 := admBody(t, admV1)
	h := newBlockedHook()
	const shutdownTimeout = 2 * time.Second
	sup := &cm.SupervisionSpec{
		InitialBackoff:  metav1.Duration{Duration: time.Millisecond},
		MaxBackoff:      metav1.Duration{Duration: 10 * time.Millisecond},
		ShutdownTimeout: metav1.Duration{Duration: shutdownTimeout},
	}
	f := admServe(t, webhook.Config{}, sup, h.admHook)
	defer close(h.release)
	replies := make(chan admReply, 1)
	go func() { replies <- admDo(t, f.srv.Client(), "POST", f.srv.URL+"/validate?timeout=30s", v1) }()
	<-h.entered

	begin := time.Now()
	if err := f.mgr.RestartChild(context.Background(), "validate"); err != nil {
		t.Fatalf("RestartChild: %v", err)
	}
	if took := time.Since(begin); took > shutdownTimeout {
		t.Errorf("RestartChild took %s, over ShutdownTimeout %s", took, shutdownTimeout)
	}
	if n := h.starts.Load(); n != 2 {
		t.Errorf("Start called %d times, want 2", n)
	}
	if err := f.mgr.Err(); err != nil {
		t.Errorf("Err %v, want nil: a bounded drain is no overdue Shutdown", err)
	}
}
