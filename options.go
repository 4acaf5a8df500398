package controllermanager

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/supervisor"
)

// Option configures a manager beyond its seed arguments. Constructors take
// them last, so code written against the seed compiles unchanged.
type Option func(*options)

type options struct {
	logger      *slog.Logger
	clock       supervisor.Clock
	identity    string
	lock        resourcelock.Interface
	eventBuffer int
	registerer  prometheus.Registerer // WithRegisterer
	leaseName   string                // set by NewControllerManager for the metrics
}

// WithLogger sets the manager's logger; protoactor's own logs go to it too
// (its informational chatter at Debug). Default: slog.Default() at Warn and
// above, so a manager is silent unless something fails.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithClock sets the clock of the supervisor's timers (backoff, probes,
// health deadlines) and the one the lease guards read (renewals' send times
// and checks; client-go's own election timing stays on the real clock);
// tests pass k8s.io/utils/clock/testing.FakeClock. Default: the real clock.
func WithClock(clock supervisor.Clock) Option {
	return func(o *options) { o.clock = clock }
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
// EventsDropped event). Default 10,000.
func WithEventBuffer(n int) Option {
	return func(o *options) { o.eventBuffer = n }
}

func collectOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(minLevel{min: slog.LevelWarn, next: slog.Default().Handler()})
	}
	return o
}
