package webhook

import (
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// Config configures the admission handler of a manager. Its zero
// value serves with the defaults each field states.
type Config struct {
	// MaxBodyBytes bounds a request's body; a larger one is answered 413.
	// Default (0 or negative) 7 MiB: an AdmissionReview carries at most two
	// objects (old and new) of at most 3 MiB each (the API server's limit on
	// a request body), and less than 1 MiB of the rest.
	MaxBodyBytes int64
	// MaxInFlight bounds, per webhook and per incarnation of it, the Handle
	// calls running at once, those that outlived their request's deadline
	// included; a request past it is answered 429. A restart gives the
	// webhook a fresh budget (the calls of the incarnation before no longer
	// count), and an incarnation whose slots are all held by calls that
	// outlived their requests fails (actors.ErrHandlesAbandoned), whatever
	// FailureThreshold says, so that its supervisor restarts it. The
	// manager's metrics count such calls by path:
	// controllermanager_webhook_handles_abandoned_total and
	// controllermanager_webhook_handles_abandoned_running. Default (0) 256;
	// negative: no bound.
	MaxInFlight int
	// MaxBodyReads bounds the request bodies being read and decoded at
	// once, across the handler's webhooks: a request past it is answered
	// 429 with Retry-After: 1 (which the API server retries, as it does
	// MaxInFlight's 429) before any of its body is read, so that clients
	// that claim large bodies and send them slowly, or not at all, cannot
	// pile up buffers. A body's buffer grows with the bytes that arrive,
	// never ahead of them on the Content-Length a client claims, so the
	// bodies held at once are at most MaxBodyReads × MaxBodyBytes, and only
	// when that much has been sent. Default (0) 64; negative: no bound.
	MaxBodyReads int
	// DefaultTimeout is how long a request may take when it has no
	// ?timeout= parameter (the API server always sends one). Default 10s,
	// the API server's default timeoutSeconds.
	DefaultTimeout time.Duration
	// ReadyTimeout bounds the wait for a webhook's Ready before a request is
	// answered 503. Default 1s.
	ReadyTimeout time.Duration
	// FailureThreshold is how many failed Handle calls in a row (an error,
	// no response, or no answer before the request's deadline) make the
	// webhook fail, so that the supervision strategy restarts it; a panic
	// in Handle fails it at once. Default (0) 5; negative: only panics fail
	// it.
	FailureThreshold int
}

// The defaults of Config (internal/defaults; docs/defaults.md lists them).
const (
	DefaultMaxBodyBytes     = defaults.WebhookMaxBodyBytes
	DefaultMaxInFlight      = defaults.WebhookMaxInFlight
	DefaultMaxBodyReads     = defaults.WebhookMaxBodyReads
	DefaultTimeout          = defaults.WebhookTimeout
	DefaultReadyTimeout     = defaults.WebhookReadyTimeout
	DefaultFailureThreshold = defaults.WebhookFailureThreshold
)
