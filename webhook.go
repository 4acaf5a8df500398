package controllermanager

import (
	"net/http"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/internal/admission"
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
// bounded by cfg: a POST to a webhook's Path() with an admission.k8s.io/v1
// (or v1beta1) AdmissionReview runs the webhook's Handle, in a goroutine
// owned by the webhook's actor, and is answered with an AdmissionReview of
// the same apiVersion whose response.uid is the request's. Requests run
// concurrently.
//
// Bad input never reaches Handle: an unknown path is answered 404, another
// method 405, a Content-Type other than application/json 415, a body over
// cfg.MaxBodyBytes 413, one that arrives while cfg.MaxBodyReads bodies are
// being read 429 (before its body is read), a body that is not an
// AdmissionReview with a request and a uid (or of another apiVersion, or a
// ?timeout= that is not a duration of at least a second) 400 with the
// reason. A webhook not running (not started, restarting, stopped) or not
// Ready() is answered 503, one with cfg.MaxInFlight calls running 429. A
// Handle that returns an error, or panics, or has not answered shortly
// before the request's ?timeout= (10% of it, at most a second, before) is
// answered 200 with a review that denies the request, its status carrying
// the reason; the failure counts towards cfg.FailureThreshold. Every
// request is answered exactly once.
//
// The handler reads the webhooks the manager has (AddChild and RemoveChild
// included) at each request; Path() is asked once per webhook and must not
// change (one that has not returned within a second is waited for again,
// up to a second, by each request for a path no webhook serves, until it
// has). Of two webhooks with one path, the one added first serves it.
// The handler may be created before Start; until then it answers 503. A
// BaseManager hosts no webhooks (they are plain runnables to it): its
// handler answers 404. Its requests are counted in the manager's metrics
// under controller-runtime's names (controller_runtime_webhook_requests_total,
// _latency_seconds and _requests_in_flight, labelled by path); see
// docs/webhooks.md for the flow and every status.
func (m *BaseManager) WebhookHandler(cfg WebhookConfig) http.Handler {
	host := webhookHost{Observed: m.handle.Observed, system: m.handle.System}
	return admission.NewHandler(host, cfg, m.opts.logger.With("component", "webhooks"), m.metrics.Webhooks)
}

// webhookHost is the manager as admission.NewHandler sees it.
type webhookHost struct {
	*supervise.Observed
	system *actor.ActorSystem
}

// Send delivers msg to the actor pid from outside the actor system.
func (h webhookHost) Send(pid *actor.PID, msg any) { h.system.Root.Send(pid, msg) }
