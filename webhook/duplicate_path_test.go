package webhook_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// Two webhooks at one path were accepted: the one added first served it and
// the other was only logged, at the first request. That is an invalid
// configuration, found by a review: Start now fails with an error naming
// both webhooks and the path (ErrDuplicatePath), and nothing runs.
func TestStartRefusesTwoWebhooksAtOnePath(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func() (startable, error)
	}{
		{"ControllerManager", func() (startable, error) {
			m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", admQuiet)
			if err != nil {
				return nil, err
			}
			return startNoTimeout{m}, nil
		}},
		{"WebhookManager", func() (startable, error) {
			return cm.NewWebhookManager(cm.NewContext(nil), admQuiet), nil
		}},
	} {
		t.Run(mk.name, func(t *testing.T) {
			mgr, err := mk.new()
			if err != nil {
				t.Fatal(err)
			}
			a, b, c := newAdmHook("first", "/validate"), newAdmHook("second", "validate"), newAdmHook("other", "/mutate")
			mgr.Add(a, c, b)
			err = mgr.Start(context.Background())
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), admWait)
				defer cancel()
				mgr.ShutdownAndWait(ctx)
			}()
			if err == nil {
				t.Fatal("Start accepted two webhooks at /validate")
			}
			if !errors.Is(err, cm.ErrDuplicatePath) {
				t.Errorf("Start: %v, want an error wrapping ErrDuplicatePath", err)
			}
			for _, want := range []string{`"first"`, `"second"`, `"/validate"`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start: %v, want it to name %s", err, want)
				}
			}
			if n := a.starts.Load() + b.starts.Load() + c.starts.Load(); n != 0 {
				t.Errorf("%d webhooks started, want none", n)
			}
		})
	}
}

// AddChild of a webhook at a path another webhook of the running manager
// serves is refused the same way, and the one serving it goes on.
func TestAddChildRefusesAWebhookAtATakenPath(t *testing.T) {
	v1 := admBody(t, admV1)
	first := newAdmHook("first", "/validate")
	f := admServe(t, webhook.Config{}, nil, first)
	second := newAdmHook("second", "/validate")
	ctx, cancel := context.WithTimeout(context.Background(), admWait)
	defer cancel()
	err := f.mgr.AddChild(ctx, second)
	if err == nil {
		t.Fatal("AddChild accepted a second webhook at /validate")
	}
	if !errors.Is(err, cm.ErrDuplicatePath) || !strings.Contains(err.Error(), `"first"`) || !strings.Contains(err.Error(), `"second"`) {
		t.Errorf("AddChild: %v, want an error wrapping ErrDuplicatePath naming both webhooks", err)
	}
	if second.starts.Load() != 0 {
		t.Error("the refused webhook was started")
	}
	f.post(t, "/validate", v1).wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	if first.handled.Load() != 1 {
		t.Errorf("the first webhook handled %d requests, want 1", first.handled.Load())
	}
}

// startable is what the test needs of either manager.
type startable interface {
	Add(...cm.Runnable)
	Start(context.Context) error
	ShutdownAndWait(context.Context)
}

// startNoTimeout gives a ControllerManager a WebhookManager's Start.
type startNoTimeout struct{ *cm.ControllerManager }

func (m startNoTimeout) Start(ctx context.Context) error { return m.ControllerManager.Start(ctx, 0) }
