package health

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the metrics of g in the Prometheus exposition
// formats (text, and OpenMetrics when the scraper asks for it). Pass a
// manager's Gatherer, or the host's registry when the manager's metrics are
// registered on it (WithRegisterer). It panics when g is nil.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		panic("health: MetricsHandler: nil Gatherer")
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}
