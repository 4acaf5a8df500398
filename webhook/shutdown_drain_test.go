package webhook_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
)

// blockedHook is a webhook whose Handle blocks until release is closed,
// ignoring its context (as a call stuck in a slow dependency does), and
// which records whether its Shutdown was called while a Handle ran.
type blockedHook struct {
	*admHook
	running        atomic.Int32
	entered        chan struct{}
	release        chan struct{}
	shutdownCalled chan struct{}
	shutdownOnce   sync.Once
	besideHandle   atomic.Bool
}

func newBlockedHook() *blockedHook {
	h := &blockedHook{
		admHook:        newAdmHook("validate", "/validate"),
		entered:        make(chan struct{}, 1),
		release:        make(chan struct{}),
		shutdownCalled: make(chan struct{}),
	}
	h.setHandle(func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		h.running.Add(1)
		defer h.running.Add(-1)
		h.entered <- struct{}{}
		<-h.release
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	h.setShutdown(func(context.Context) {
		if h.running.Load() > 0 {
			h.besideHandle.Store(true)
		}
		h.shutdownOnce.Do(func() { close(h.shutdownCalled) })
	})
	return h
}

// stopController is a controller whose Shutdown is reported on a channel.
type stopController struct {
	stopped chan struct{}
	once    sync.Once
}

func (c *stopController) Name() string                   { return "worker" }
func (c *stopController) Run(context.Context) error      { return nil }
func (c *stopController) GetHealth() actors.HealthStatus { return actors.HealthStatus{Healthy: true} }
func (c *stopController) Shutdown(context.Context)       { c.once.Do(func() { close(c.stopped) }) }

// goroutineIn reports whether a goroutine's stack holds fn.
func goroutineIn(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// A Handle call in flight when ShutdownAndWait is called is drained: the
// webhook's Shutdown waits for it, ShutdownAndWait does not return while it
// runs, and the API server gets the call's own answer (200), not 503.
func TestShutdownAndWaitDrainsHandleInFlight(t *testing.T) {
	v1 := admBody(t, admV1)
	h := newBlockedHook()
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", admQuiet)
	if err != nil {
		t.Fatal(err)
	}
	mgr.Add(h)
	srv := httptest.NewTLSServer(mgr.Handler())
	defer srv.Close()
	if err := mgr.Start(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	replies := make(chan admReply, 1)
	go func() { replies <- admDo(t, srv.Client(), "POST", srv.URL+"/validate?timeout=30s", v1) }()
	<-h.entered

	ctx, cancel := context.WithTimeout(context.Background(), admWait)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		mgr.ShutdownAndWait(ctx)
	}()
	// The stop reaches the webhook and waits for the call: its goroutine
	// is seen in drainAdmissions. Until then neither its Shutdown nor
	// ShutdownAndWait's return may happen.
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(admWait)
	defer deadline.Stop()
wait:
	for {
		select {
		case <-h.shutdownCalled:
			t.Fatal("the webhook's Shutdown was called while its Handle ran")
		case <-returned:
			t.Fatalf("ShutdownAndWait returned (Err %v) while a Handle call ran", mgr.Err())
		case <-deadline.C:
			t.Fatal("the webhook's stop never waited for its Handle call")
		case <-poll.C:
			if goroutineIn("childactor.drainAdmissions") {
				break wait
			}
		}
	}
	close(h.release)
	released = true
	<-returned
	r := <-replies
	if ctx.Err() != nil || mgr.Err() != nil {
		t.Errorf("ShutdownAndWait: context %v, Err %v; want both nil", ctx.Err(), mgr.Err())
	}
	if h.besideHandle.Load() {
		t.Error("the webhook's Shutdown ran beside its Handle")
	}
	if h.shutdowns.Load() != 1 {
		t.Errorf("Shutdown called %d times, want 1", h.shutdowns.Load())
	}
	if r.code != 200 {
		t.Errorf("the Handle call that ran was answered %d %q, want 200", r.code, r.text)
	}
}

// A Handle call that hangs holds ShutdownAndWait no longer than its
// context: ShutdownAndWait returns then, its Err names the webhook as
// unstopped, and the other children stopped at once, not after the call.
func TestShutdownAndWaitBoundedByHungHandle(t *testing.T) {
	v1 := admBody(t, admV1)
	h := newBlockedHook()
	released := false
	defer func() {
		if !released {
			close(h.release)
		}
	}()
	worker := &stopController{stopped: make(chan struct{})}
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", admQuiet)
	if err != nil {
		t.Fatal(err)
	}
	mgr.Add(worker, h)
	srv := httptest.NewTLSServer(mgr.Handler())
	defer srv.Close()
	if err := mgr.Start(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	replies := make(chan admReply, 1)
	go func() { replies <- admDo(t, srv.Client(), "POST", srv.URL+"/validate?timeout=30s", v1) }()
	<-h.entered

	const bound = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	begin := time.Now()
	mgr.ShutdownAndWait(ctx)
	took := time.Since(begin)
	if took > bound+admWait/2 {
		t.Errorf("ShutdownAndWait took %s with a %s context", took, bound)
	}
	select {
	case <-worker.stopped:
	default:
		t.Error("the controller was not stopped by the time ShutdownAndWait returned")
	}
	var ue *cm.UnstoppedError
	if !errors.As(mgr.Err(), &ue) {
		t.Fatalf("Err %v, want an UnstoppedError naming the webhook", mgr.Err())
	}
	var names []string
	for _, u := range ue.Children {
		names = append(names, u.Name)
	}
	if len(names) != 1 || names[0] != "validate" {
		t.Errorf("unstopped %v, want [validate]", names)
	}
	close(h.release)
	released = true
	if r := <-replies; r.code != 200 {
		t.Errorf("the Handle call that ran was answered %d %q, want 200", r.code, r.text)
	}
}
