package health

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// DefaultTimeout is the handler's timeout when neither WithTimeout nor the
// Source (TimeoutSource) sets one: a manager's default HealthTimeout.
const DefaultTimeout = defaults.ProbeTimeout

// Option configures NewHandler.
type Option func(*config)

type config struct {
	timeout  time.Duration
	healthz  []Checker
	readyz   []Checker
	livez    []Checker
	gatherer prometheus.Gatherer
	pprof    bool
}

// WithTimeout sets how long a check may take before it fails with "no
// answer". The handler answers within the timeout plus a margin of a tenth
// of it (at least 50ms, at most 1s). Default: the Source's HealthTimeout
// (TimeoutSource), else DefaultTimeout. Zero keeps the default; NewHandler
// panics on a negative d.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithHealthzCheck adds checks to /healthz, after the built-in ones, in the
// order given. Their names must be unique, and neither a built-in check's
// name nor start with ControllerCheckPrefix; NewHandler panics otherwise,
// as http.ServeMux.Handle does on a duplicate pattern.
func WithHealthzCheck(checks ...Checker) Option {
	return func(c *config) { c.healthz = append(c.healthz, checks...) }
}

// WithReadyzCheck adds checks to /readyz, after the built-in one, with the
// rules of WithHealthzCheck.
func WithReadyzCheck(checks ...Checker) Option {
	return func(c *config) { c.readyz = append(c.readyz, checks...) }
}

// WithMetrics serves g at /metrics, as MetricsHandler does; pass a manager's
// Gatherer, or the host's registry. Default: no /metrics.
func WithMetrics(g prometheus.Gatherer) Option {
	return func(c *config) { c.gatherer = g }
}

// WithPprof serves the runtime's profiles at /debug/pprof/, as
// net/http/pprof does (index, cmdline, profile, symbol, trace and each
// named profile), to GET and HEAD, and POST on symbol (go tool pprof posts
// the addresses it looks up); other methods get 405 with the Allow header.
// Off by default: profiles reveal the program's internals, and a CPU
// profile or a trace costs while it runs.
func WithPprof() Option {
	return func(c *config) { c.pprof = true }
}

// WithLivezCheck adds checks to /livez, after the built-in ones, in the
// order given, with the rules of WithHealthzCheck; PingCheck is reserved
// too. Give /livez only what a restart of the process would cure (a
// deadlocked dependency), never what the supervisor handles (a controller)
// or what a standby has to wait for (the lease).
func WithLivezCheck(checks ...Checker) Option {
	return func(c *config) { c.livez = append(c.livez, checks...) }
}
