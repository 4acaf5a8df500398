package controllermanager

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/internal/kubeevents"
)

// Kubernetes Events. A manager records, with the recorder of
// WithEventRecorder or one of its own (leader election on and a clientset),
// the supervision events an operator looks for in kubectl get events:
//
//	Normal   LeaderElected  <identity> became leader of Lease <ns>/<name>
//	Warning  LeaderLost     <identity> lost Lease <ns>/<name>: <err>
//	Warning  Escalated      <err>
//	Warning  ChildFailed    <err> (which names the child)
//
// and, with sharded leadership, instead of the first two:
//
//	Normal   ShardAcquired  <identity> acquired shard <i>, Lease <ns>/<name>-<i>
//	Normal   ShardReleased  <identity> handed shard <i> over, Lease <ns>/<name>-<i>
//	Warning  ShardLost      <identity> lost shard <i>: <err>
//
// on this replica's Pod (POD_NAME, POD_NAMESPACE and, for kubectl
// describe, POD_UID from the downward API), else on the Lease. The Lease
// lock also records client-go's own Normal LeaderElection events ("<identity>
// became leader", "<identity> stopped leading") on the Lease.
//
// The manager's own recorder writes the Events of a loss (LeaderLost,
// ShardLost, Escalated) on a lane of their own, so that they never wait
// behind routine ones queued on the clientset's rate limit; the Events
// still queued when the manager stops and its flush has waited 5s are
// dropped and counted in controllermanager_kube_events_dropped_total
// (docs/observability.md says what else can be dropped).
const (
	// EventReasonLeaderElected is the reason of the Normal Event recorded
	// when this replica acquires the lease.
	EventReasonLeaderElected = "LeaderElected"
	// EventReasonLeaderLost is the reason of the Warning Event recorded
	// when this replica, having led, loses the lease.
	EventReasonLeaderLost = "LeaderLost"
	// EventReasonEscalated is the reason of the Warning Event recorded when
	// a child's failures exhaust its restart budget and the manager stops.
	EventReasonEscalated = "Escalated"
	// EventReasonChildFailed is the reason of the Warning Event recorded for
	// each failure of a child.
	EventReasonChildFailed = "ChildFailed"
	// EventReasonShardAcquired is the reason of the Normal Event recorded
	// when this replica acquires a shard's Lease (sharded leadership).
	EventReasonShardAcquired = "ShardAcquired"
	// EventReasonShardReleased is the reason of the Normal Event recorded
	// when this replica hands a shard over, its controllers stopped.
	EventReasonShardReleased = "ShardReleased"
	// EventReasonShardLost is the reason of the Warning Event recorded when
	// this replica loses a shard's Lease.
	EventReasonShardLost = "ShardLost"
)

// kubeEvents is the wiring of a manager's Kubernetes Events
// (internal/kubeevents) into the manager: a nil *kubeEvents records none,
// and each method is then a no-op.
type kubeEvents struct{ rec *kubeevents.Recorder }

// newKubeEvents returns the Events of a manager whose lease is
// namespace/name (both empty with election off), or nil when it records
// none: no WithEventRecorder, and no clientset or no election.
func newKubeEvents(o options, client kubernetes.Interface, namespace, name, identity string) *kubeEvents {
	rec := kubeevents.New(kubeevents.Config{
		Logger: o.logger, Host: o.recorder, Client: client,
		Namespace: namespace, Name: name, Identity: identity,
	})
	if rec == nil {
		return nil
	}
	return &kubeEvents{rec: rec}
}

// lockRecorder is the recorder of the Lease lock: client-go's own leader
// election Events go through the manager's recorder once it records.
func (k *kubeEvents) lockRecorder() resourcelock.EventRecorder {
	if k == nil {
		return nil
	}
	return k.rec.LockRecorder()
}

// countDrops has the Events the manager's own recorder drops counted in
// dropped (controllermanager_kube_events_dropped_total), by reason.
func (k *kubeEvents) countDrops(dropped *prometheus.CounterVec) {
	if k != nil {
		k.rec.OnDrop(func(reason string, n int) { dropped.WithLabelValues(reason).Add(float64(n)) })
	}
}

// start makes the manager's own recorder, unless the host gave one.
func (k *kubeEvents) start() {
	if k != nil {
		k.rec.Start()
	}
}

// record records e, if it is one of the Events.
func (k *kubeEvents) record(e Event) {
	if k != nil {
		k.rec.Record(e)
	}
}

// stop writes what the own recorder has queued, within
// kubeevents.FlushTimeout, then shuts it down.
func (k *kubeEvents) stop() {
	if k != nil {
		k.rec.Stop()
	}
}

// flushes reports whether stop has the own recorder's queue to flush.
func (k *kubeEvents) flushes() bool { return k != nil && k.rec.Flushes() }
