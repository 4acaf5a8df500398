package controllermanager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/actorkube/controllermanager/internal/metrics"
)

// WithRegisterer registers the manager's metrics on r too, besides the
// manager's own registry (see Gatherer). Default: the manager's own registry
// only; the process-wide prometheus.DefaultRegisterer is never used unless
// passed here.
//
// Every manager registers the same metric names: to put two managers on one
// registry, wrap it for each with a label that tells them apart, as in
// prometheus.WrapRegistererWith(prometheus.Labels{"manager": "webhooks"}, r).
// A registration that fails (a name taken) is logged, and the manager runs
// on with its metrics on its own registry only.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.registerer = r }
}

// Gatherer returns the manager's own registry: its metrics, and nothing
// else, whatever WithRegisterer says. Serve it with health.MetricsHandler
// or health.WithMetrics; a host that passed its registry to WithRegisterer
// serves that instead.
//
// Two managers in one process each have their own, and each serves its
// own figures. Their Gatherers cannot be merged (prometheus.Gatherers):
// the same metric names and labels collide and the scrape answers 500. To
// serve both on one endpoint, register each on the host's registry under a
// label of its own (WithRegisterer) and serve that registry; likewise, do
// not merge a manager's Gatherer with the registry it is registered on.
func (m *BaseManager) Gatherer() prometheus.Gatherer { return m.metrics.Registry }

// newManagerMetrics registers m's metrics (internal/metrics) on a registry
// of their own and on the host's registerer, if any. It is called once
// m.handle and m.election are set.
func newManagerMetrics(m *BaseManager, identity string, o options) *metrics.Manager {
	return metrics.New(metrics.Source{
		Status:        m.Status,
		Observed:      m.handle.Observed,
		HealthTimeout: m.timing.HealthTimeout,
		Lease:         o.leaseName,
		Identity:      identity,
		Shards:        m.shardCount(),
		Logger:        o.logger,
		Registerer:    o.registerer,
	})
}
