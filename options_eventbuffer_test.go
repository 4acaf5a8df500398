package controllermanager_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	cm "github.com/actorkube/controllermanager"
)

// A negative WithEventBuffer is refused, naming the option: by
// NewControllerManager, and by a WebhookManager's Start (its constructor
// returns no error), rather than taken as the default.
func TestNegativeEventBufferIsRefused(t *testing.T) {
	_, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", cm.WithEventBuffer(-1))
	if err == nil || !strings.Contains(err.Error(), "WithEventBuffer") {
		t.Errorf("NewControllerManager: want an error naming WithEventBuffer, have %v", err)
	}
	w := cm.NewWebhookManager(nil, cm.WithEventBuffer(-1), cm.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { w.ShutdownAndWait(context.Background()) })
	if err := w.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "WithEventBuffer") {
		t.Errorf("WebhookManager.Start: want an error naming WithEventBuffer, have %v", err)
	}
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", cm.WithEventBuffer(0), cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("WithEventBuffer(0) is the default: have %v", err)
	}
	m.ShutdownAndWait(context.Background())
}
