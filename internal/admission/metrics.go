package admission

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the request metrics of admission handlers, named and labelled
// as controller-runtime names its webhook server's, so that dashboards and
// alerts built for controller-runtime operators read them unchanged:
//
//   - controller_runtime_webhook_requests_total{webhook, code}, a counter of
//     the requests answered, by HTTP status code;
//   - controller_runtime_webhook_latency_seconds{webhook}, a histogram of the
//     time from the request's arrival at the handler to its answer;
//   - controller_runtime_webhook_requests_in_flight{webhook}, a gauge of the
//     requests being served;
//
// and, in a collector of their own (Abandonments), two of the manager's, of
// the Handle calls that outlived their request (still running a second
// after it ended: childactor counts such a call as abandoned, against
// MaxInFlight until it returns):
//
//   - controllermanager_webhook_handles_abandoned_total{webhook}, a counter
//     of the calls abandoned;
//   - controllermanager_webhook_handles_abandoned_running{webhook}, a gauge
//     of those of them still running.
//
// The webhook label is the webhook's path, as with controller-runtime. Only
// requests to a path some webhook serves are counted, so a client cannot
// grow the label's values at will: those answered 404, and those answered
// 503 because the manager has not started or has stopped (before routing),
// are not. A denial is a 200, as it is on the wire; a request whose client
// went away before its answer counts as a 200 with nothing written, as
// net/http answers it.
//
// Metrics is a prometheus.Collector of the controller-runtime metrics, and
// Abandonments one of the other two: register both on a registry of one's
// own, never on a global one unless the program chooses to. A manager
// registers them on its registry and on the Registerer of WithRegisterer,
// each on its own, so that a registry where controller-runtime's webhook
// server has taken the names of the first (its metrics.Registry) still
// takes the second.
type Metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	inFlight  *prometheus.GaugeVec
	abandoned *abandonedMetrics
}

// abandonedMetrics count the Handle calls that outlived their request,
// through the abandonedSeries of each path.
type abandonedMetrics struct {
	total   *prometheus.CounterVec
	running *prometheus.GaugeVec
}

// Describe sends the descriptors of the two metrics.
func (a *abandonedMetrics) Describe(ch chan<- *prometheus.Desc) {
	a.total.Describe(ch)
	a.running.Describe(ch)
}

// Collect sends the series of the two metrics.
func (a *abandonedMetrics) Collect(ch chan<- prometheus.Metric) {
	a.total.Collect(ch)
	a.running.Collect(ch)
}

// Abandonments is the collector of controllermanager_webhook_handles_abandoned_total
// and controllermanager_webhook_handles_abandoned_running, which m does not
// collect itself.
func (m *Metrics) Abandonments() prometheus.Collector { return m.abandoned }

// NewMetrics returns metrics with no series yet: a path gets its series, the
// counters of codes 200 and 500 at zero among them, when a handler first
// routes to it.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_webhook_requests_total",
			Help: "Total number of admission requests by HTTP status code.",
		}, []string{"webhook", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "controller_runtime_webhook_latency_seconds",
			Help: "Histogram of the latency of processing admission requests",
		}, []string{"webhook"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controller_runtime_webhook_requests_in_flight",
			Help: "Current number of admission requests being served.",
		}, []string{"webhook"}),
		abandoned: &abandonedMetrics{
			total: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "controllermanager_webhook_handles_abandoned_total",
				Help: "Handle calls of a webhook still running a second after their request ended (abandoned): each holds a MaxInFlight slot until it returns, and once they hold every slot the webhook fails and restarts.",
			}, []string{"webhook"}),
			running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "controllermanager_webhook_handles_abandoned_running",
				Help: "Abandoned Handle calls of a webhook (see controllermanager_webhook_handles_abandoned_total) that have not returned yet, those of incarnations before a restart included.",
			}, []string{"webhook"}),
		},
	}
}

// Describe sends the descriptors of the three controller-runtime metrics.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.latency.Describe(ch)
	m.inFlight.Describe(ch)
}

// Collect sends the series of the three controller-runtime metrics.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.latency.Collect(ch)
	m.inFlight.Collect(ch)
}

// serving creates path's series, as controller-runtime does when it
// registers a webhook, so that a rate of errors is 0, not absent, before
// the first one, and returns the series its abandoned calls count in. A nil
// m does nothing and returns nil.
func (m *Metrics) serving(path string) *abandonedSeries {
	if m == nil {
		return nil
	}
	m.requests.WithLabelValues(path, "200")
	m.requests.WithLabelValues(path, "500")
	m.latency.WithLabelValues(path)
	m.inFlight.WithLabelValues(path)
	return &abandonedSeries{total: m.abandoned.total.WithLabelValues(path), running: m.abandoned.running.WithLabelValues(path)}
}

// abandonedSeries is one path's series of abandoned Handle calls: the
// childactor.AbandonedCalls of the calls routed to it, looked up once per
// route rather than once per request.
type abandonedSeries struct {
	total   prometheus.Counter
	running prometheus.Gauge
}

// Abandoned counts a call abandoned, and running.
func (s *abandonedSeries) Abandoned() {
	s.total.Inc()
	s.running.Inc()
}

// Returned counts an abandoned call no longer running.
func (s *abandonedSeries) Returned() { s.running.Dec() }

// begin counts a request to path in flight and returns the writer that
// records its status; end records the rest.
func (m *Metrics) begin(path string, w http.ResponseWriter) *statusRecorder {
	g := m.inFlight.WithLabelValues(path)
	g.Inc()
	return &statusRecorder{ResponseWriter: w, m: m, path: path, inFlight: g, start: time.Now()}
}

// statusRecorder is an http.ResponseWriter that keeps the status written.
type statusRecorder struct {
	http.ResponseWriter
	m        *Metrics
	path     string
	inFlight prometheus.Gauge
	start    time.Time
	code     int // 0 until written
}

// WriteHeader records code and writes it.
func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write writes b, after an implicit 200 when no status was written.
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap is the request's own writer, for http.ResponseController.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// end records the request's answer.
func (r *statusRecorder) end() {
	code := r.code
	if code == 0 {
		code = http.StatusOK // net/http answers a handler that wrote nothing with a 200
	}
	r.m.latency.WithLabelValues(r.path).Observe(time.Since(r.start).Seconds())
	r.m.requests.WithLabelValues(r.path, strconv.Itoa(code)).Inc()
	r.inFlight.Dec()
}
