package controllermanager

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// Option configures a manager beyond its seed arguments. Constructors take
// them last, so code written against the seed compiles unchanged.
type Option func(*options)

type options struct {
	logger      *slog.Logger
	clock       clock.WithTickerAndDelayedExecution
	identity    string
	lock        resourcelock.Interface
	eventBuffer int
	registerer  prometheus.Registerer // WithRegisterer
	leaseName   string                // set by NewControllerManager for the metrics
	drain       time.Duration         // WithSubscriberDrainTimeout; 0: DefaultSubscriberDrainTimeout
	recorder    record.EventRecorder  // WithEventRecorder
	leClient    kubernetes.Interface  // WithLeaderElectionClient
}

// DefaultSubscriberDrainTimeout is how long ShutdownAndWait waits, by
// default, for the event subscribers to take the last events.
const DefaultSubscriberDrainTimeout = defaults.SubscriberDrainTimeout

// WithSubscriberDrainTimeout sets how long ShutdownAndWait waits, once the
// manager has stopped, for the event subscribers to take the last events
// (Subscribe). A subscriber still busy then keeps its goroutine and may
// still receive them; ShutdownAndWait returns. Default
// DefaultSubscriberDrainTimeout; negative: do not wait.
func WithSubscriberDrainTimeout(d time.Duration) Option {
	return func(o *options) { o.drain = d }
}

func (o options) subscriberDrain() time.Duration {
	if o.drain == 0 {
		return DefaultSubscriberDrainTimeout
	}
	return o.drain
}

// clockOrReal is the clock of WithClock, or the real one.
func (o options) clockOrReal() clock.WithTickerAndDelayedExecution {
	if o.clock != nil {
		return o.clock
	}
	return clock.RealClock{}
}

// WithLogger sets the manager's logger; protoactor's own logs go to it too
// (its informational chatter at Debug). Default: slog.Default() at Warn and
// above, so a manager is silent unless something fails.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithClock sets the clock of every timer of the supervision tree (backoff,
// probes, health deadlines, the fence and shutdown bounds), of the
// GetHealth deadline, of the sharded elector (renewals, expiry on the
// local-observation clock) and the one the lease guards read (renewals'
// send times and checks). The HTTP servers' deadlines and the timings
// measured for logs stay on the real clock. Tests pass
// k8s.io/utils/clock/testing.FakeClock, which implements
// clock.WithTickerAndDelayedExecution. Default: the real clock.
func WithClock(c clock.WithTickerAndDelayedExecution) Option {
	return func(o *options) { o.clock = c }
}

// WithIdentity sets this replica's lease holder identity. Default: the host
// name and a random UUID.
func WithIdentity(identity string) Option {
	return func(o *options) { o.identity = identity }
}

// WithLeaseLock replaces the Lease lock of leader election with lock (any
// resourcelock.Interface: tests and hosts outside Kubernetes hand their own).
// With it, election needs no clientset; the lock's identity is used.
func WithLeaseLock(lock resourcelock.Interface) Option {
	return func(o *options) { o.lock = lock }
}

// WithEventBuffer sets how many events a subscriber may fall behind before
// the oldest it has not received are dropped (it is then sent an
// EventsDropped event). Default 10,000; zero keeps the default. A negative
// n is refused, naming the option: NewControllerManager returns the error,
// and the Start of a WebhookManager or a BaseManager, whose constructors
// return none, fails with it.
func WithEventBuffer(n int) Option {
	return func(o *options) { o.eventBuffer = n }
}

// invalid names every option given a value it cannot take, all at once.
func (o options) invalid() error {
	if o.eventBuffer < 0 {
		return fmt.Errorf("WithEventBuffer: must not be negative, got %d", o.eventBuffer)
	}
	return nil
}

func collectOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(minLevel{min: defaults.LogLevel, next: slog.Default().Handler()})
	}
	return o
}

// WithLogr sets the manager's logger from a logr.Logger, as WithLogger does
// from a *slog.Logger: the two are one sink (the last of the two options
// given wins). The runtime's records reach it through logr.ToSlogHandler
// (slog Info is V(0), Debug V(4), Warn is Info at V(0), Error is Error); the
// elector logs to it directly and client-go's event recorder through its
// context, leaving the process-wide klog alone; see docs/observability.md.
// A zero logr.Logger discards everything.
func WithLogr(logger logr.Logger) Option {
	return func(o *options) { o.logger = slog.New(logr.ToSlogHandler(logger)) }
}

// WithEventRecorder records Kubernetes Events with recorder: a Normal
// LeaderElected, and a Warning LeaderLost, Escalated or ChildFailed, on this
// replica's Pod (POD_NAME and POD_NAMESPACE) or else on the Lease; and the
// lease lock's own "became leader" and "stopped leading" events on the
// Lease. The host owns recorder and its broadcaster: it shuts them down.
// Default: with leader election on and a clientset, a recorder of the
// manager's own, rate-limited and aggregated, shut down with the manager;
// otherwise no Events. See docs/observability.md.
func WithEventRecorder(recorder record.EventRecorder) Option {
	return func(o *options) { o.recorder = recorder }
}
