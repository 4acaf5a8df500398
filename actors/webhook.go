package actors

import (
	"errors"
)

// Refusals of an AdmissionCall, matched with errors.Is.
var (
	// ErrWebhookUnavailable: the webhook is not running (starting, restarting
	// after a failure, or stopped), or the child is not a webhook's.
	ErrWebhookUnavailable = errors.New("actors: webhook not running")
	// ErrWebhookNotReady: the webhook's Ready returned false, panicked or did
	// not answer within the policy's ReadyTimeout.
	ErrWebhookNotReady = errors.New("actors: webhook not ready")
	// ErrTooManyRequests: the webhook already runs MaxInFlight Handle calls.
	ErrTooManyRequests = errors.New("actors: too many admission requests in flight")
)

// ErrNoResponse is wrapped by the failure of a Handle that returned neither
// a response nor an error.
var ErrNoResponse = errors.New("actors: Handle returned neither a response nor an error")

// ErrHandlesAbandoned is wrapped by the failure of a webhook's incarnation
// whose MaxInFlight slots are all held by Handle calls that outlived their
// requests (calls that ignore their context): the supervisor restarts it,
// and the new incarnation has a budget of its own.
var ErrHandlesAbandoned = errors.New("actors: every in-flight slot is held by Handle calls that outlived their requests")
