package ctrlruntime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cm "github.com/actorkube/controllermanager"
)

// MetricsCollector returns a collector that exposes every metric on
// controller-runtime's registry (sigs.k8s.io/controller-runtime/pkg/metrics
// Registry): controller_runtime_reconcile_total, _errors_total, _panics_total,
// _time_seconds, the worker gauges, the workqueue_* metrics, client-go's
// rest_client_* metrics and whatever else the process registered there.
//
// controller-runtime registers those metrics once per process, on its own
// global registry, when its packages are initialised; its metrics server
// serves that registry. The collector bridges it: on each scrape it
// gathers the registry and hands its samples on, so a manager's
// Registerer (controllermanager.WithRegisterer) serves them next to the
// manager's own. It is unchecked (it describes nothing in advance): a
// registry that also collects one of those names by other means reports a
// duplicate at scrape time.
func MetricsCollector() prometheus.Collector { return bridge{from: ctrlmetrics.Registry} }

// RegisterMetrics registers MetricsCollector on r.
func RegisterMetrics(r prometheus.Registerer) error {
	if err := r.Register(MetricsCollector()); err != nil {
		return fmt.Errorf("ctrlruntime: registering controller-runtime's metrics: %w", err)
	}
	return nil
}

type bridge struct {
	from prometheus.Gatherer
	skip func(name string) bool // families not handed on; nil: none
}

// Describe describes nothing: the collector is unchecked.
func (bridge) Describe(chan<- *prometheus.Desc) {}

// Collect hands on every sample of the gathered families.
func (b bridge) Collect(ch chan<- prometheus.Metric) {
	families, err := b.from.Gather()
	if err != nil && len(families) == 0 {
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("controller_runtime_metrics_bridge", "controller-runtime registry", nil, nil), err)
		return
	}
	for _, f := range families {
		if b.skip != nil && b.skip(f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			ch <- convert(f, m)
		}
	}
}

func convert(f *dto.MetricFamily, m *dto.Metric) prometheus.Metric {
	names := make([]string, len(m.GetLabel()))
	values := make([]string, len(m.GetLabel()))
	for i, l := range m.GetLabel() {
		names[i], values[i] = l.GetName(), l.GetValue()
	}
	desc := prometheus.NewDesc(f.GetName(), f.GetHelp(), names, nil)
	var (
		metric prometheus.Metric
		err    error
	)
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		metric, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, m.GetCounter().GetValue(), values...)
	case dto.MetricType_GAUGE:
		metric, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, m.GetGauge().GetValue(), values...)
	case dto.MetricType_UNTYPED:
		metric, err = prometheus.NewConstMetric(desc, prometheus.UntypedValue, m.GetUntyped().GetValue(), values...)
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		buckets := make(map[float64]uint64, len(h.GetBucket()))
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		metric, err = prometheus.NewConstHistogram(desc, h.GetSampleCount(), h.GetSampleSum(), buckets, values...)
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		quantiles := make(map[float64]float64, len(s.GetQuantile()))
		for _, q := range s.GetQuantile() {
			quantiles[q.GetQuantile()] = q.GetValue()
		}
		metric, err = prometheus.NewConstSummary(desc, s.GetSampleCount(), s.GetSampleSum(), quantiles, values...)
	default:
		err = errors.New("unknown metric type " + f.GetType().String())
	}
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return metric
}

// dropElectionGauge unregisters controller-runtime's
// leader_election_master_status from its registry. client-go's elector,
// which sets it, never runs under a Manager; the ControllerManager's gauge
// of that name, set by the fenced election, replaces it.
func dropElectionGauge() {
	ctrlmetrics.Registry.Unregister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"}))
}

// managerProbeMetric is a metric every ControllerManager registers; its
// twin tells whether the manager's metrics are on a registry already.
const managerProbeMetric = "controllermanager_health_probe_duration_seconds"

// shareMetrics puts the manager's metrics on controller-runtime's
// metrics.Registry, which its metrics server serves, until the returned
// function is called; when they are there already (the host passed
// controllermanager.WithRegisterer(metrics.Registry)) it does nothing. The
// manager's controller_runtime_webhook_* metrics are left out: under a
// Manager, controller-runtime's webhook server serves the admission
// requests and counts them under those names.
func shareMetrics(ctrl *cm.ControllerManager) (unshare func(), err error) {
	twin := prometheus.NewHistogram(prometheus.HistogramOpts{Name: managerProbeMetric, Help: "twin"})
	if err := ctrlmetrics.Registry.Register(twin); err != nil {
		return func() {}, nil // registered by WithRegisterer
	}
	ctrlmetrics.Registry.Unregister(twin)
	shared.once.Do(func() { err = ctrlmetrics.Registry.Register(&shared) })
	if err != nil {
		return nil, fmt.Errorf("sharing the manager's metrics on controller-runtime's registry: %w", err)
	}
	b := &bridge{from: ctrl.Gatherer(), skip: func(name string) bool {
		return strings.HasPrefix(name, "controller_runtime_webhook_")
	}}
	shared.mu.Lock()
	shared.from = append(shared.from, b)
	shared.mu.Unlock()
	return func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.from = slices.DeleteFunc(shared.from, func(x *bridge) bool { return x == b })
	}, nil
}

// shared is the one unchecked collector on metrics.Registry that hands on
// the metrics of the Managers whose Start is running (an unchecked
// collector cannot be unregistered, so there is one per process).
var shared sharedMetrics

type sharedMetrics struct {
	once sync.Once
	mu   sync.Mutex
	from []*bridge
}

// Describe describes nothing: the collector is unchecked.
func (*sharedMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect hands on the metrics of every running Manager.
func (s *sharedMetrics) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	from := slices.Clone(s.from)
	s.mu.Unlock()
	for _, b := range from {
		b.Collect(ch)
	}
}
