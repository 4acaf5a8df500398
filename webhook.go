package controllermanager

import (
	"net/http"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/webhook"
)

// Admission serving lives in package webhook; these names keep the root
// package's API of the first release.

// WebhookConfig configures the admission handler of a manager; see
// webhook.Config.
type WebhookConfig = webhook.Config

// The defaults of WebhookConfig; see webhook.Config.
const (
	DefaultWebhookMaxBodyBytes     = webhook.DefaultMaxBodyBytes
	DefaultWebhookMaxInFlight      = webhook.DefaultMaxInFlight
	DefaultWebhookMaxBodyReads     = webhook.DefaultMaxBodyReads
	DefaultWebhookTimeout          = webhook.DefaultTimeout
	DefaultWebhookReadyTimeout     = webhook.DefaultReadyTimeout
	DefaultWebhookFailureThreshold = webhook.DefaultFailureThreshold
)

// WebhookServerConfig configures a WebhookServer; see webhook.ServerConfig.
type WebhookServerConfig = webhook.ServerConfig

// WebhookServer serves admission webhooks over HTTPS; see webhook.Server.
type WebhookServer = webhook.Server

// NewWebhookServer checks cfg and loads the certificate pair; see
// webhook.NewServer.
func NewWebhookServer(cfg WebhookServerConfig) (*WebhookServer, error) {
	return webhook.NewServer(cfg)
}

// Handler returns the manager's admission handler with the default
// WebhookConfig; see WebhookHandler.
func (m *BaseManager) Handler() http.Handler { return m.WebhookHandler(WebhookConfig{}) }

// WebhookHandler returns an http.Handler that serves the manager's webhooks,
// bounded by cfg: see webhook.NewHandler for the routing and every status.
// The handler may be created before Start; until then it answers 503. A
// BaseManager hosts no webhooks (they are plain runnables to it): its
// handler answers 404. Its requests are counted in the manager's metrics,
// under controller-runtime's names (see webhook.Metrics).
func (m *BaseManager) WebhookHandler(cfg WebhookConfig) http.Handler {
	host := webhookHost{Observed: m.handle.Observed, system: m.handle.System}
	return webhook.NewHandler(host, cfg, m.opts.logger.With("component", "webhooks"), m.metrics.Webhooks)
}

// webhookHost is the manager as webhook.NewHandler sees it.
type webhookHost struct {
	*supervise.Observed
	system *actor.ActorSystem
}

// Send delivers msg to the actor pid from outside the actor system.
func (h webhookHost) Send(pid *actor.PID, msg any) { h.system.Root.Send(pid, msg) }
