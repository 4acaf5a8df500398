package controllermanager_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/webhook"
)

// The webhook names of the root package's first release, which now alias
// package webhook: each must keep its type, fields and methods, so code
// written against the first release compiles unchanged. This part is
// checked by the compiler; the test below checks the defaults' values.
var (
	_ webhook.Config       = cm.WebhookConfig{}
	_ webhook.ServerConfig = cm.WebhookServerConfig{}
	_ *webhook.Server      = (*cm.WebhookServer)(nil)

	_ func(cm.WebhookServerConfig) (*cm.WebhookServer, error)      = cm.NewWebhookServer
	_ func(*cm.WebhookServer, context.Context) error               = (*cm.WebhookServer).Start
	_ func(*cm.WebhookServer, context.Context, net.Listener) error = (*cm.WebhookServer).Serve
	_ func(*cm.WebhookServer, context.Context) error               = (*cm.WebhookServer).Shutdown

	_ func(*cm.BaseManager) http.Handler                      = (*cm.BaseManager).Handler
	_ func(*cm.BaseManager, cm.WebhookConfig) http.Handler    = (*cm.BaseManager).WebhookHandler
	_ func(*cm.WebhookManager) http.Handler                   = (*cm.WebhookManager).Handler
	_ func(*cm.WebhookManager, cm.WebhookConfig) http.Handler = (*cm.WebhookManager).WebhookHandler
	_ func(*cm.ControllerManager) http.Handler                = (*cm.ControllerManager).Handler

	_ = cm.WebhookConfig{
		MaxBodyBytes: int64(0), MaxInFlight: int(0), DefaultTimeout: time.Duration(0),
		ReadyTimeout: time.Duration(0), FailureThreshold: int(0),
	}
	_ = cm.WebhookServerConfig{
		Addr: "", CertFile: "", KeyFile: "", Handler: http.Handler(nil), Probes: http.Handler(nil),
		CertCheckInterval: time.Duration(0), ReadHeaderTimeout: time.Duration(0),
		ShutdownTimeout: time.Duration(0), Logger: (*slog.Logger)(nil),
	}
)

// TestWebhookDefaultsKeepTheirValues: the first release's defaults are part
// of its meaning.
func TestWebhookDefaultsKeepTheirValues(t *testing.T) {
	for _, c := range []struct {
		name       string
		have, want any
	}{
		{"DefaultWebhookMaxBodyBytes", int64(cm.DefaultWebhookMaxBodyBytes), int64(7 << 20)},
		{"DefaultWebhookMaxInFlight", int64(cm.DefaultWebhookMaxInFlight), int64(256)},
		{"DefaultWebhookTimeout", time.Duration(cm.DefaultWebhookTimeout), 10 * time.Second},
		{"DefaultWebhookReadyTimeout", time.Duration(cm.DefaultWebhookReadyTimeout), time.Second},
		{"DefaultWebhookFailureThreshold", int64(cm.DefaultWebhookFailureThreshold), int64(5)},
	} {
		if c.have != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.have, c.want)
		}
	}
}
