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
	DefaultStuckAfter              = time.Minute
	DefaultErrorRateThreshold      = 0.5
	DefaultErrorRateWindow         = time.Minute
	DefaultErrorRateMinReconciles  = 10
)

// DefaultPanicThreshold was the default of TypedOptions.PanicThreshold: the
// third panic of an incarnation restarted the reconciler.
//
// Deprecated: a panic no longer restarts a reconciler unless
// PanicThreshold is set (or RecoverPanic is false), as a poison object
// panics again in every incarnation and spent the restart budget; set
// PanicThreshold: DefaultPanicThreshold for the former behaviour.
const DefaultPanicThreshold = 3

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
	// RecoverPanic is controller-runtime's option of that name. Nil or true
	// (the default, as there): a reconcile's panic is recovered, counted in
	// controller_runtime_reconcile_panics_total, logged ("Observed a
	// panic", with its stack) and the request retried with the rate
	// limiter's backoff, for ever; the reconciler runs on (see
	// PanicThreshold). False, where controller-runtime would let the panic
	// end the process: the first panic is a failure of the reconciler, which
	// the supervisor restarts, within its budget, past which the manager
	// escalates. Default: on a Manager, manager.Options.Controller's.
	RecoverPanic *bool
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

	// PanicThreshold, when positive, is how many reconciles of one
	// incarnation may panic before the reconciler reports a failure, so
	// that the supervisor restarts it (Shutdown, then Run with a fresh
	// controller and queue); the restart budget counts these restarts, and
	// a poison object, which panics again in every incarnation, spends it.
	// Default (0), and negative: panics never restart the reconciler, as
	// under controller-runtime; each is handled like an error (the request
	// is retried with backoff) and counted in GetHealth's summary and in
	// the error rate. RecoverPanic false makes it 1.
	PanicThreshold int
	// StuckAfter is how long one reconcile may run before GetHealth says
	// the reconciler is stuck (unhealthy, naming the request). Past the
	// manager's SupervisionSpec.UnhealthyThreshold probes in a row, the
	// supervisor restarts it. Default (0) 1m; negative: never stuck.
	StuckAfter time.Duration
	// ErrorRateThreshold is the share of failing requests within
	// ErrorRateWindow at or past which GetHealth is unhealthy: of the
	// distinct requests reconciled in the window (once there are
	// ErrorRateMinReconciles of them), those whose last reconcile failed (an
	// error, a panic). A request counts once however often it was retried,
	// so that one object failing for ever (retried with backoff, as under
	// controller-runtime) does not make the reconciler unhealthy and
	// restart it. Default (0) 0.5; negative: never unhealthy for errors.
	ErrorRateThreshold float64
	// ErrorRateWindow is the period the error rate is measured over.
	// Default (0) 1m.
	ErrorRateWindow time.Duration
	// ErrorRateMinReconciles is how many distinct requests must have been
	// reconciled in the window before the error rate counts. Default (0) 10.
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
	if o.RecoverPanic != nil && !*o.RecoverPanic {
		o.PanicThreshold = 1
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
