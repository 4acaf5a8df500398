package ctrlruntime

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The defaults of TypedOptions.
const (
	DefaultMaxConcurrentReconciles = 1
	DefaultCacheSyncTimeout        = 2 * time.Minute
	DefaultPanicThreshold          = 3
	DefaultStuckAfter              = time.Minute
	DefaultErrorRateThreshold      = 0.5
	DefaultErrorRateWindow         = time.Minute
	DefaultErrorRateMinReconciles  = 10
)

// Options configures a reconciler hosted by NewControllerManagedBy or New.
type Options = TypedOptions[reconcile.Request]

// TypedOptions configures a reconciler of requests of type request. Its
// zero value works: every field states its default. The first group are
// controller-runtime's controller.TypedOptions of the same names; the
// second says how the supervisor sees the reconciler.
type TypedOptions[request comparable] struct {
	// MaxConcurrentReconciles is the number of workers. Default (0) 1.
	MaxConcurrentReconciles int
	// RateLimiter spaces the retries of a request whose reconcile failed or
	// asked for a requeue. Default: controller-runtime's (per item
	// exponential, 5ms to 1000s).
	RateLimiter workqueue.TypedRateLimiter[request]
	// CacheSyncTimeout bounds the wait of Run for the sources to sync.
	// Default (0) 2m. Run is also bounded by the manager's start timeout.
	CacheSyncTimeout time.Duration
	// ReconciliationTimeout, when positive, is the deadline of each
	// reconcile's context (controller-runtime's guardrail). Default 0: none.
	ReconciliationTimeout time.Duration
	// UsePriorityQueue selects controller-runtime's priority queue (nil:
	// controller-runtime's default, which is on) or the classic workqueue.
	UsePriorityQueue *bool
	// Logger is the controller's logger (controller-runtime logs its start,
	// its workers and each failed reconcile there). Default: on a Manager,
	// manager.Options.Controller.Logger, else the manager's logger;
	// otherwise discard.
	Logger logr.Logger
	// LogConstructor builds the logger of each reconcile (req nil: of the
	// controller), as controller-runtime's option of that name. Default:
	// Logger with controller-runtime's builder's fields (controller,
	// controllerGroup, controllerKind; per request the For kind's name
	// with the object's key, namespace and name); for New, Logger with
	// "controller" and the request as "object".
	LogConstructor func(req *request) logr.Logger

	// PanicThreshold is how many reconciles of one incarnation may panic
	// before the reconciler reports a failure, so that the supervisor
	// restarts it (Shutdown, then Run with a fresh controller and queue).
	// Below it a panic is handled like an error (the request is retried
	// with backoff) and counted in GetHealth. Default (0) 3; negative:
	// panics never restart the reconciler.
	PanicThreshold int
	// StuckAfter is how long one reconcile may run before GetHealth says
	// the reconciler is stuck (unhealthy, naming the request). Past the
	// manager's SupervisionSpec.UnhealthyThreshold probes in a row, the
	// supervisor restarts it. Default (0) 1m; negative: never stuck.
	StuckAfter time.Duration
	// ErrorRateThreshold is the share of failed reconciles (an error, a
	// panic) within ErrorRateWindow at or past which GetHealth is unhealthy,
	// once ErrorRateMinReconciles have ended in the window. Default (0)
	// 0.5; negative: never unhealthy for errors.
	ErrorRateThreshold float64
	// ErrorRateWindow is the period the error rate is measured over.
	// Default (0) 1m.
	ErrorRateWindow time.Duration
	// ErrorRateMinReconciles is how many reconciles must have ended in the
	// window before the error rate counts. Default (0) 10.
	ErrorRateMinReconciles int
	// Clock times reconciles for StuckAfter and ErrorRateWindow; tests pass
	// a k8s.io/utils/clock/testing.FakeClock. Default: the real clock.
	Clock clock.PassiveClock
}

func (o TypedOptions[request]) withDefaults() TypedOptions[request] {
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.CacheSyncTimeout <= 0 {
		o.CacheSyncTimeout = DefaultCacheSyncTimeout
	}
	if o.PanicThreshold == 0 {
		o.PanicThreshold = DefaultPanicThreshold
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = DefaultStuckAfter
	}
	if o.ErrorRateThreshold == 0 {
		o.ErrorRateThreshold = DefaultErrorRateThreshold
	}
	if o.ErrorRateWindow <= 0 {
		o.ErrorRateWindow = DefaultErrorRateWindow
	}
	if o.ErrorRateMinReconciles <= 0 {
		o.ErrorRateMinReconciles = DefaultErrorRateMinReconciles
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}
