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
//     requests being served.
//
// The webhook label is the webhook's path, as with controller-runtime. Only
// requests to a path some webhook serves are counted, so a client cannot
// grow the label's values at will: those answered 404, and those answered
// 503 because the manager has not started or has stopped (before routing),
// are not. A denial is a 200, as it is on the wire; a request whose client
// went away before its answer counts as a 200 with nothing written, as
// net/http answers it.
//
// Metrics is a prometheus.Collector: register it on a registry of one's
// own, never on a global one unless the program chooses to. A manager
// registers one on its registry and on the Registerer of WithRegisterer.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
}

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
	}
}

// Describe sends the descriptors of the three metrics.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.latency.Describe(ch)
	m.inFlight.Describe(ch)
}

// Collect sends the series of the three metrics.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.latency.Collect(ch)
	m.inFlight.Collect(ch)
}

// serving creates path's series, as controller-runtime does when it
// registers a webhook, so that a rate of errors is 0, not absent, before
// the first one. A nil m does nothing.
func (m *Metrics) serving(path string) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(path, "200")
	m.requests.WithLabelValues(path, "500")
	m.latency.WithLabelValues(path)
	m.inFlight.WithLabelValues(path)
}

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
