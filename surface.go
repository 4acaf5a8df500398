package controllermanager

import (
	"context"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
)

// The methods of *BaseManager, declared again on the two managers users
// hold, so that `go doc ControllerManager.Done` and the type's method list
// in the godoc show them: a method promoted from an embedded field is not
// listed under the outer type. Each is one call; BaseManager's doc is the
// full contract.

// GetReadiness returns nil once the pre-flight is done and until the
// manager shuts down (a standby waiting for the lease is ready); see
// BaseManager.GetReadiness.
func (m *ControllerManager) GetReadiness() error { return m.BaseManager.GetReadiness() }

// IsStarting reports whether the manager has been elected (or needs no
// election) and begun to recover stores and start controllers.
func (m *ControllerManager) IsStarting() bool { return m.BaseManager.IsStarting() }

// IsStarted reports whether every controller has started.
func (m *ControllerManager) IsStarted() bool { return m.BaseManager.IsStarted() }

// HealthTimeout is SupervisionSpec.HealthTimeout: GetHealth returns within it.
func (m *ControllerManager) HealthTimeout() time.Duration { return m.BaseManager.HealthTimeout() }

// Done is closed once the manager has stopped: requested, escalated, lost
// its lease or failed to start. Err then says why.
func (m *ControllerManager) Done() <-chan struct{} { return m.BaseManager.Done() }

// Err is why the manager stopped: nil while it runs and after a requested
// shutdown; see BaseManager.Err.
func (m *ControllerManager) Err() error { return m.BaseManager.Err() }

// Subscribe registers fn for every event from now on, in order, on a
// goroutine of fn's own; see BaseManager.Subscribe.
func (m *ControllerManager) Subscribe(fn func(Event)) (cancel func()) {
	return m.BaseManager.Subscribe(fn)
}

// Send sends a lifecycle message (package supervisor) to the root
// supervisor without waiting; RestartChild, StopChild and StartChild are
// the typed calls that wait.
func (m *ControllerManager) Send(msg any) { m.BaseManager.Send(msg) }

// Request sends a lifecycle message to the root supervisor and waits for
// its answer or for ctx; see BaseManager.Request.
func (m *ControllerManager) Request(ctx context.Context, msg any) (any, error) {
	return m.BaseManager.Request(ctx, msg)
}

// Status returns the manager's Status: its phase, the lease holder it last
// observed, every child's state.
func (m *ControllerManager) Status(ctx context.Context) (Status, error) {
	return m.BaseManager.Status(ctx)
}

// AddChild adds a controller, webhook, store or runnable to the running
// manager and waits until it has started; see BaseManager.AddChild.
func (m *ControllerManager) AddChild(ctx context.Context, child any) error {
	return m.BaseManager.AddChild(ctx, child)
}

// RemoveChild shuts the named child down and removes it from the manager.
func (m *ControllerManager) RemoveChild(ctx context.Context, name string) error {
	return m.BaseManager.RemoveChild(ctx, name)
}

// RestartChild shuts the named controller, webhook or store down and starts it again, and
// returns once its start call has returned; see BaseManager.RestartChild.
func (m *ControllerManager) RestartChild(ctx context.Context, name string) error {
	return m.BaseManager.RestartChild(ctx, name)
}

// StopChild shuts the named child down and leaves it stopped until
// StartChild or RestartChild; see BaseManager.StopChild.
func (m *ControllerManager) StopChild(ctx context.Context, name string) error {
	return m.BaseManager.StopChild(ctx, name)
}

// StartChild starts a child stopped by StopChild and returns once its start
// call has returned; see BaseManager.StartChild.
func (m *ControllerManager) StartChild(ctx context.Context, name string) error {
	return m.BaseManager.StartChild(ctx, name)
}

// PID is the root supervisor's PID, for actor-native callers.
func (m *ControllerManager) PID() *actor.PID { return m.BaseManager.PID() }

// Handler serves the AdmissionReviews of the webhooks added to the
// manager, routed by their Path; see BaseManager.Handler.
func (m *ControllerManager) Handler() http.Handler { return m.BaseManager.Handler() }

// WebhookHandler is Handler with cfg's limits; see BaseManager.WebhookHandler.
func (m *ControllerManager) WebhookHandler(cfg WebhookConfig) http.Handler {
	return m.BaseManager.WebhookHandler(cfg)
}

// Gatherer gathers the manager's own metrics; see BaseManager.Gatherer.
func (m *ControllerManager) Gatherer() prometheus.Gatherer { return m.BaseManager.Gatherer() }

// GetHealth returns the health of the manager's controllers: a
// WebhookManager runs none, so it is empty; see BaseManager.GetHealth.
func (m *WebhookManager) GetHealth() []HealthStatus { return m.BaseManager.GetHealth() }

// GetReadiness returns nil once every webhook has started and until the
// manager shuts down; see BaseManager.GetReadiness.
func (m *WebhookManager) GetReadiness() error { return m.BaseManager.GetReadiness() }

// IsStarting reports whether every webhook has started: a WebhookManager
// becomes ready, starting and started together.
func (m *WebhookManager) IsStarting() bool { return m.BaseManager.IsStarting() }

// IsStarted reports whether every webhook has started.
func (m *WebhookManager) IsStarted() bool { return m.BaseManager.IsStarted() }

// HealthTimeout is the deadline of GetHealth and of the probes.
func (m *WebhookManager) HealthTimeout() time.Duration { return m.BaseManager.HealthTimeout() }

// ShutdownAndWait shuts every webhook and runnable down in parallel and
// waits until they have returned or ctx ends; see BaseManager.ShutdownAndWait.
func (m *WebhookManager) ShutdownAndWait(ctx context.Context) { m.BaseManager.ShutdownAndWait(ctx) }

// Done is closed once the manager has stopped: requested, escalated or
// failed to start. Err then says why.
func (m *WebhookManager) Done() <-chan struct{} { return m.BaseManager.Done() }

// Err is why the manager stopped: nil while it runs and after a requested
// shutdown; see BaseManager.Err.
func (m *WebhookManager) Err() error { return m.BaseManager.Err() }

// Subscribe registers fn for every event from now on, in order, on a
// goroutine of fn's own; see BaseManager.Subscribe.
func (m *WebhookManager) Subscribe(fn func(Event)) (cancel func()) {
	return m.BaseManager.Subscribe(fn)
}

// Send sends a lifecycle message (package supervisor) to the root
// supervisor without waiting.
func (m *WebhookManager) Send(msg any) { m.BaseManager.Send(msg) }

// Request sends a lifecycle message to the root supervisor and waits for
// its answer or for ctx; see BaseManager.Request.
func (m *WebhookManager) Request(ctx context.Context, msg any) (any, error) {
	return m.BaseManager.Request(ctx, msg)
}

// Status returns the manager's Status: its phase and every child's state.
func (m *WebhookManager) Status(ctx context.Context) (Status, error) {
	return m.BaseManager.Status(ctx)
}

// AddChild adds a webhook or runnable to the running manager and waits
// until it has started; see BaseManager.AddChild.
func (m *WebhookManager) AddChild(ctx context.Context, child any) error {
	return m.BaseManager.AddChild(ctx, child)
}

// RemoveChild shuts the named child down and removes it from the manager.
func (m *WebhookManager) RemoveChild(ctx context.Context, name string) error {
	return m.BaseManager.RemoveChild(ctx, name)
}

// RestartChild shuts the named webhook down and starts it again, and
// returns once its start call has returned; see BaseManager.RestartChild.
func (m *WebhookManager) RestartChild(ctx context.Context, name string) error {
	return m.BaseManager.RestartChild(ctx, name)
}

// StopChild shuts the named child down and leaves it stopped until
// StartChild or RestartChild; see BaseManager.StopChild.
func (m *WebhookManager) StopChild(ctx context.Context, name string) error {
	return m.BaseManager.StopChild(ctx, name)
}

// StartChild starts a child stopped by StopChild and returns once its start
// call has returned; see BaseManager.StartChild.
func (m *WebhookManager) StartChild(ctx context.Context, name string) error {
	return m.BaseManager.StartChild(ctx, name)
}

// PID is the root supervisor's PID, for actor-native callers.
func (m *WebhookManager) PID() *actor.PID { return m.BaseManager.PID() }

// Handler serves the AdmissionReviews of the manager's webhooks, routed by
// their Path; see BaseManager.Handler.
func (m *WebhookManager) Handler() http.Handler { return m.BaseManager.Handler() }

// WebhookHandler is Handler with cfg's limits; see BaseManager.WebhookHandler.
func (m *WebhookManager) WebhookHandler(cfg WebhookConfig) http.Handler {
	return m.BaseManager.WebhookHandler(cfg)
}

// Gatherer gathers the manager's own metrics; see BaseManager.Gatherer.
func (m *WebhookManager) Gatherer() prometheus.Gatherer { return m.BaseManager.Gatherer() }
