package supervise

import (
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
)

// Facade plumbing: WebhookRoute is one webhook child as an admission
// handler (package webhook) sees it: the
// webhook and the actor its requests are sent to (as actors.AdmissionCall).
type WebhookRoute struct {
	Name    string
	Webhook actors.Webhook
	PID     *actor.PID
	// Gone is closed once the webhook has left the table (RemoveChild): a
	// request sent to PID before that, but not yet answered, never will be
	// (its message is a dead letter), and is answered 503 at once.
	Gone <-chan struct{}
	gone chan struct{}
}

// Facade plumbing: WebhookTable is the set of webhook children, in the order they were added.
// The supervisor publishes a new table in Observed each time it spawns or
// removes a webhook's actor; a published table is never modified, so a
// reader may keep it and tell a change by comparing pointers.
//
// The table holds no paths: Path is user code, which the supervisor never
// calls in its Receive. The admission handler asks each webhook for its path
// once, off the supervisor's mailbox.
type WebhookTable struct {
	Routes []WebhookRoute
}

// Facade plumbing: Webhooks returns the current table of webhook children
// (for package webhook); nil until the
// first webhook's actor is spawned.
func (o *Observed) Webhooks() *WebhookTable { return o.webhooks.Load() }

// addWebhook publishes a table with rec, a webhook child just spawned.
func (o *Observed) addWebhook(rec *childRecord) {
	wh, ok := rec.spec.Impl.(actors.Webhook)
	if !ok || rec.spec.Kind != actors.KindWebhook {
		return
	}
	var routes []WebhookRoute
	if old := o.webhooks.Load(); old != nil {
		routes = slices.Clip(old.Routes)
	}
	gone := make(chan struct{})
	routes = append(routes, WebhookRoute{Name: rec.spec.Name, Webhook: wh, PID: rec.pid, Gone: gone, gone: gone})
	o.webhooks.Store(&WebhookTable{Routes: routes})
}

// removeWebhook publishes a table without rec, a child being removed.
func (o *Observed) removeWebhook(rec *childRecord) {
	old := o.webhooks.Load()
	if old == nil || rec.spec.Kind != actors.KindWebhook {
		return
	}
	routes := slices.DeleteFunc(slices.Clone(old.Routes), func(r WebhookRoute) bool {
		if r.PID != rec.pid {
			return false
		}
		close(r.gone)
		return true
	})
	o.webhooks.Store(&WebhookTable{Routes: routes})
}
