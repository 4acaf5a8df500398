package controllermanager

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/admission"
	"github.com/actorkube/controllermanager/internal/childactor"
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

// ErrDuplicatePath is wrapped by the error of Start or AddChild when two
// webhooks have one Path(); see webhook.ErrDuplicatePath.
var ErrDuplicatePath = webhook.ErrDuplicatePath

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
// has). Start and AddChild refuse two webhooks with one path (an error
// wrapping ErrDuplicatePath names both); should two still meet (one added
// by Request, or whose Path() was late at the check), the one added first
// serves it.
// The handler may be created before Start; until then it answers 503. A
// BaseManager hosts no webhooks (they are plain runnables to it): its
// handler answers 404. Its requests are counted in the manager's metrics
// under controller-runtime's names (controller_runtime_webhook_requests_total,
// _latency_seconds and _requests_in_flight, labelled by path), and its
// Handle calls that outlived their request under the manager's
// (controllermanager_webhook_handles_abandoned_total and _running); see
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

// pathCheckTimeout bounds the Path() calls of the duplicate-path check, as
// the admission handler bounds its own: a webhook whose Path() has not
// returned by then is left out of the check (the handler logs it, and
// serves it once its Path() returns).
const pathCheckTimeout = time.Second

// namedWebhook is a webhook with the name (the path, in a group) its child
// has, for the duplicate-path check; an empty name is its group's path
// (prefix, "" at the root) and its Name().
type namedWebhook struct {
	name, prefix string
	wh           actors.Webhook
}

// startWebhookPaths checks the webhooks among specs, the children of a
// Start, for two with one path.
func startWebhookPaths(specs []childactor.Spec) error {
	var added []namedWebhook
	for _, s := range specs {
		if wh, ok := s.Impl.(actors.Webhook); ok && s.Kind == actors.KindWebhook {
			added = append(added, namedWebhook{name: s.Name, wh: wh})
		}
	}
	return checkWebhookPaths(nil, added)
}

// addChildWebhookPaths checks the webhooks child (a child of AddChild, or a
// group with its children) brings into the running manager against those
// it has, and against one another, for two with one path; parent is the
// group child goes under ("" for the root). The webhooks served under
// replaces ("<path>/", or "" for none) are left out: a fleet member's
// group built again replaces the one that was at its path.
func (m *BaseManager) addChildWebhookPaths(child any, parent, replaces string) error {
	if m.mode == supervise.ModeBase {
		return nil // it hosts no webhooks: they are plain runnables to it
	}
	var added []namedWebhook
	for _, v := range flattenGroupsAt(parent, []any{child}) {
		parent := ""
		if in, ok := v.(supervise.InGroup); ok {
			parent, v = in.Parent+"/", in.Value
		}
		wh, ok := v.(actors.Webhook)
		if !ok || m.mode == supervise.ModeControllers && isController(v) {
			continue // a controller first, as the supervisor classifies it
		}
		added = append(added, namedWebhook{prefix: parent, wh: wh}) // named by askWebhookPath
	}
	if len(added) == 0 {
		return nil
	}
	var known []namedWebhook
	if table := m.handle.Observed.Webhooks(); table != nil {
		for _, rt := range table.Routes {
			if replaces != "" && strings.HasPrefix(rt.Name, replaces) {
				continue
			}
			known = append(known, namedWebhook{name: rt.Name, wh: rt.Webhook})
		}
	}
	return checkWebhookPaths(known, added)
}

func isController(v any) bool { _, ok := v.(actors.Controller); return ok }

// checkWebhookPaths returns an error wrapping ErrDuplicatePath for each
// webhook of added whose Path() is that of a webhook before it (in known,
// then in added), naming both and the path; nil if there is none. Paths
// are compared as the admission handler serves them (a leading "/"
// added). Path() (and Name(), for a webhook named by its parent only) is
// user code: each webhook is asked in a goroutine, under recover, side by
// side, and waited for pathCheckTimeout at most; one that panics, is empty
// or is late is left out.
func checkWebhookPaths(known, added []namedWebhook) error {
	all := append(slices.Clip(known), added...)
	answers := make([]chan namedPath, len(all))
	for i, w := range all {
		answers[i] = make(chan namedPath, 1)
		go func() { answers[i] <- askWebhookPath(w) }()
	}
	timer := time.NewTimer(pathCheckTimeout)
	defer timer.Stop()
	expired := false
	first := map[string]string{} // path → the name of the first webhook at it
	var errs []error
	for i := range all {
		var a namedPath
		if !expired {
			select {
			case a = <-answers[i]:
			case <-timer.C:
				expired = true
			}
		}
		if expired {
			select {
			case a = <-answers[i]:
			default: // late: left out
			}
		}
		if a.path == "" {
			continue
		}
		if name, dup := first[a.path]; dup {
			if i >= len(known) {
				errs = append(errs, fmt.Errorf("%w: %q and %q at %q", ErrDuplicatePath, name, a.name, a.path))
			}
			continue
		}
		first[a.path] = a.name
	}
	return errors.Join(errs...)
}

// namedPath is a webhook's name and its path as the handler serves it; an
// empty path when it could not be had.
type namedPath struct{ name, path string }

// askWebhookPath asks w for its Path() (and its Name(), when w has no name
// yet), under recover.
func askWebhookPath(w namedWebhook) namedPath {
	a := namedPath{name: w.name}
	err := childactor.Call(actors.KindWebhook, cmp.Or(w.name, w.prefix), "Path", func() error {
		if a.name == "" {
			a.name = w.prefix + w.wh.Name()
		}
		a.path = w.wh.Path()
		return nil
	})
	switch {
	case err != nil:
		return namedPath{}
	case a.path != "" && !strings.HasPrefix(a.path, "/"):
		a.path = "/" + a.path
	}
	return a
}
