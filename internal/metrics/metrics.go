// Package metrics is a manager's Prometheus metrics: a collector that
// turns the supervisor's Status into gauges and counters on every scrape,
// the health-probe histogram, the admission requests' metrics, and the
// panics counted from the events. The root package registers them
// (WithRegisterer) and serves them (Gatherer); docs/observability.md lists
// them.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/admission"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// The manager's metrics. The supervisor's state is their only source: the
// collector asks for a Status on every scrape, so they never lag or drift
// from what Status and GetHealth say.
var (
	leaderDesc = prometheus.NewDesc("controllermanager_leader",
		"Whether this replica holds the leader-election lease (1) or not (0). Present only with leader election on.",
		[]string{"lease", "identity"}, nil)
	phaseDesc = prometheus.NewDesc("controllermanager_phase",
		"The manager's phase: 1 for the phase it is in, 0 for every other.",
		[]string{"phase"}, nil)
	childRestartsDesc = prometheus.NewDesc("controllermanager_child_restarts_total",
		"Times a child's start call ran after its first: after a failure, a RestartChild or a StartChild.",
		[]string{"child", "kind"}, nil)
	childFailuresDesc = prometheus.NewDesc("controllermanager_child_failures_total",
		"Failures of a child: an error or panic in its user calls, a failure its background work reported, or too many unhealthy probes in a row.",
		[]string{"child", "kind"}, nil)
	childPanicsDesc = prometheus.NewDesc("controllermanager_child_panics_total",
		"Panics recovered in a child's user calls (Run, Recover, Start, Shutdown, GetHealth, Ready, Handle).",
		[]string{"child", "kind"}, nil)
	childHealthyDesc = prometheus.NewDesc("controllermanager_child_healthy",
		"Whether the supervisor counts a child healthy (1) or not (0): its last liveness probe, and 0 from a failure until it has started again.",
		[]string{"child", "kind"}, nil)
	groupExhaustedDesc = prometheus.NewDesc("controllermanager_group_exhausted",
		"Whether a group is stopped because a child of it spent the group's restart budget (OnExhausted Stop) (1) or not (0).",
		[]string{"child"}, nil)
	shardHeldDesc = prometheus.NewDesc("controllermanager_shard_held",
		"With sharded leadership: whether this replica holds the shard's Lease (1) or not (0).",
		[]string{"lease", "shard"}, nil)
	shardsHeldDesc = prometheus.NewDesc("controllermanager_shards_held",
		"With sharded leadership: how many shards this replica holds.",
		nil, nil)
	shardTransitionsDesc = prometheus.NewDesc("controllermanager_shard_transitions_total",
		"With sharded leadership: shards this replica acquired, released (handed over once their controllers stopped) and lost.",
		[]string{"transition"}, nil)
	// masterStatusDesc is client-go's and controller-runtime's leader
	// election gauge, under their name and label, so that their dashboards
	// work; client-go's own is never registered (it needs a global
	// provider).
	masterStatusDesc = prometheus.NewDesc("leader_election_master_status",
		"Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
		[]string{"name"}, nil)
)

// probeBuckets span a sweep of a few children (well under a millisecond) to
// one that waits out a long HealthTimeout.
var probeBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Manager is the metrics of one manager.
type Manager struct {
	// Registry is the manager's own registry: these metrics and nothing
	// else.
	Registry *prometheus.Registry
	// probe is observed by GetHealth: the time to gather every
	// controller's health.
	probe prometheus.Histogram
	// Webhooks counts the admission requests of every WebhookHandler, and
	// their Handle calls abandoned (still running after the request ended).
	Webhooks *admission.Metrics
	// KubeEventsDropped counts, by reason, the Kubernetes Events the
	// manager's own recorder dropped: still queued when it stopped
	// (internal/kubeevents' Recorder.OnDrop).
	KubeEventsDropped *prometheus.CounterVec
	// ClusterReady is controllermanager_cluster_ready{fleet, cluster}: 1
	// while a fleet's member cluster is Online (its subtree runs), 0
	// otherwise; the fleet sets it and deletes a disengaged cluster's
	// series.
	ClusterReady *prometheus.GaugeVec
	// panicsMu guards panics and lastPanic, written by the subscriber's
	// goroutine and read by scrapes.
	panicsMu sync.Mutex
	// panics counts the panics in each child's user calls, from the
	// events (a count Status does not keep), by child; a child that never
	// panicked has no entry (and no memory of its own: a series per child
	// of a CounterVec cost about 490 B of heap per child), and the status
	// collector reports its 0.
	panics map[string]uint64
	// lastPanic is the last *PanicError counted per child, so that a
	// failure wrapping the panic of a probe already counted is not counted
	// twice.
	lastPanic map[string]*actors.PanicError
}

// Source is what a manager's metrics are read from and registered on.
type Source struct {
	// Status asks the supervisor for its Status, on every scrape.
	Status func(ctx context.Context) (supervisor.Status, error)
	// Observed is what the facade observes of the supervisor: the phase,
	// leadership and shard moves, for a scrape the supervisor does not
	// answer.
	Observed *supervise.Observed
	// HealthTimeout bounds a scrape's wait for Status.
	HealthTimeout time.Duration
	// Lease is the Lease's name; empty with election off.
	Lease string
	// Identity is this replica's lease identity.
	Identity string
	// Shards is the number of shards of the manager's leadership: 1 with
	// the single lease or election off.
	Shards int
	// Logger logs a failed registration and an unanswered scrape.
	Logger *slog.Logger
	// Registerer is the host's (WithRegisterer), or nil.
	Registerer prometheus.Registerer
}

// New registers a manager's metrics on a registry of their own and on
// src.Registerer, if any; a registration there that fails is logged.
func New(src Source) *Manager {
	mm := &Manager{
		Registry: prometheus.NewRegistry(),
		probe: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "controllermanager_health_probe_duration_seconds",
			Help:    "Time GetHealth took to gather every controller's health (each /healthz request calls it once; concurrent requests share a call).",
			Buckets: probeBuckets,
		}),
		Webhooks: admission.NewMetrics(),
		KubeEventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controllermanager_kube_events_dropped_total",
			Help: "Kubernetes Events the manager's own recorder dropped: still queued, behind the clientset's rate limit, when the manager stopped and its flush had waited 5s. By reason.",
		}, []string{"reason"}),
		ClusterReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "controllermanager_cluster_ready",
			Help: "Whether a fleet's member cluster is Online, its API server answering and its subtree running (1), or not: Offline, or not yet probed (0).",
		}, []string{"fleet", "cluster"}),
		panics:    map[string]uint64{},
		lastPanic: map[string]*actors.PanicError{},
	}
	col := &statusCollector{src: src, mm: mm}
	// The webhooks' abandoned calls are a collector of their own: on a
	// registry where controller-runtime's webhook server has the names of
	// mm.Webhooks, they are registered all the same.
	collectors := []prometheus.Collector{col, mm.probe, mm.Webhooks, mm.Webhooks.Abandonments(), mm.KubeEventsDropped, mm.ClusterReady}
	mm.Registry.MustRegister(collectors...)
	if r := src.Registerer; r != nil {
		errs := make([]error, 0, len(collectors))
		for _, c := range collectors {
			errs = append(errs, r.Register(c))
		}
		if err := errors.Join(errs...); err != nil {
			src.Logger.Error("cannot register the manager's metrics on the registerer of WithRegisterer; they are on the manager's own registry only (Gatherer)",
				"err", err)
		}
	}
	return mm
}

// ObserveProbe records a GetHealth sweep that began at start on clk.
func (mm *Manager) ObserveProbe(clk clock.PassiveClock, start time.Time) {
	mm.probe.Observe(clk.Since(start).Seconds())
}

// ObserveEvent counts the panics an event reports: a failure, a Shutdown
// or a health probe that panicked. A removed child's count goes with
// RemoveChild (its series goes with it from Status).
func (mm *Manager) ObserveEvent(e supervisor.Event) {
	switch e.Type {
	case supervisor.ChildRemoved:
		mm.panicsMu.Lock()
		delete(mm.panics, e.Child)
		delete(mm.lastPanic, e.Child)
		mm.panicsMu.Unlock()
	case supervisor.ChildFailed, supervisor.ChildStopped, supervisor.ChildUnhealthy:
		p, ok := errors.AsType[*actors.PanicError](e.Err)
		if !ok {
			return
		}
		mm.panicsMu.Lock()
		if mm.lastPanic[e.Child] != p {
			mm.lastPanic[e.Child] = p
			mm.panics[e.Child]++
		}
		mm.panicsMu.Unlock()
	}
}

// panicCounts returns a copy of the panics counted, by child (only the
// children that panicked: a scrape copies little).
func (mm *Manager) panicCounts() map[string]uint64 {
	mm.panicsMu.Lock()
	defer mm.panicsMu.Unlock()
	return maps.Clone(mm.panics)
}

// statusCollector turns the manager's Status into metrics on every scrape.
type statusCollector struct {
	src Source
	mm  *Manager // for the panics, counted from the events
}

// Describe sends the descriptors of every metric Collect sends.
func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaderDesc, masterStatusDesc, phaseDesc, childRestartsDesc, childFailuresDesc, childPanicsDesc, childHealthyDesc, groupExhaustedDesc,
		shardHeldDesc, shardsHeldDesc, shardTransitionsDesc} {
		ch <- d
	}
}

// Collect asks the supervisor for its Status, within HealthTimeout. When it
// does not answer, the manager's phase and leadership still come from what
// the facade observes, and the children's metrics are left out of this
// scrape (their absence, not stale values, says the supervisor is stuck).
func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.src.HealthTimeout)
	defer cancel()
	st, err := c.src.Status(ctx)
	if err != nil {
		obs := c.src.Observed
		c.src.Logger.Warn("metrics: the supervisor did not answer GetStatus; children's metrics left out of this scrape", "err", err)
		st = supervisor.Status{Phase: obs.Phase(), Leader: obs.Leader(), Identity: c.src.Identity}
	}
	for _, p := range supervisor.Phases() {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, boolValue(p == st.Phase), string(p))
	}
	if c.src.Lease != "" {
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, boolValue(st.Leader), c.src.Lease, st.Identity)
		ch <- prometheus.MustNewConstMetric(masterStatusDesc, prometheus.GaugeValue, boolValue(st.Leader), c.src.Lease)
	}
	if c.src.Shards > 1 {
		for _, sh := range st.Shards {
			ch <- prometheus.MustNewConstMetric(shardHeldDesc, prometheus.GaugeValue, boolValue(sh.Held), sh.Lease, strconv.Itoa(sh.Index))
		}
		held, acquired, released, lost := c.src.Observed.ShardMoves()
		ch <- prometheus.MustNewConstMetric(shardsHeldDesc, prometheus.GaugeValue, float64(held))
		ch <- prometheus.MustNewConstMetric(shardTransitionsDesc, prometheus.CounterValue, float64(acquired), "acquired")
		ch <- prometheus.MustNewConstMetric(shardTransitionsDesc, prometheus.CounterValue, float64(released), "released")
		ch <- prometheus.MustNewConstMetric(shardTransitionsDesc, prometheus.CounterValue, float64(lost), "lost")
	}
	panics := c.mm.panicCounts()
	var walk func(children []supervisor.ChildStatus)
	walk = func(children []supervisor.ChildStatus) {
		for _, child := range children {
			kind := string(child.Kind)
			ch <- prometheus.MustNewConstMetric(childRestartsDesc, prometheus.CounterValue, float64(child.Restarts), child.Name, kind)
			ch <- prometheus.MustNewConstMetric(childFailuresDesc, prometheus.CounterValue, float64(child.Failures), child.Name, kind)
			ch <- prometheus.MustNewConstMetric(childPanicsDesc, prometheus.CounterValue, float64(panics[child.Name]), child.Name, kind)
			ch <- prometheus.MustNewConstMetric(childHealthyDesc, prometheus.GaugeValue, boolValue(child.Healthy), child.Name, kind)
			if child.Group != nil {
				ch <- prometheus.MustNewConstMetric(groupExhaustedDesc, prometheus.GaugeValue, boolValue(child.Group.Exhausted), child.Name)
			}
			walk(child.Children) // a group's, by path
		}
	}
	walk(st.Children)
}

// boolValue is a gauge's 1 or 0.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
