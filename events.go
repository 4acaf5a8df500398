package controllermanager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Event is one step of the supervision tree, as Subscribe delivers it: its
// Type, Time, the Child and its Kind, the manager's Phase, the child's
// Restarts, the Shard and the Err where there is one. The fields are
// documented at supervisor.Event (go doc supervisor.Event).
type Event = supervisor.Event

// EventType says what an Event reports, one of the constants below; when
// each is published is documented at supervisor.EventType's constants.
type EventType = supervisor.EventType

// The event types (see package supervisor for when each is published).
const (
	PhaseChanged   = supervisor.PhaseChanged
	ChildStarted   = supervisor.ChildStarted
	ChildFailed    = supervisor.ChildFailed
	ChildRestarted = supervisor.ChildRestarted
	ChildStopped   = supervisor.ChildStopped
	ChildUnhealthy = supervisor.ChildUnhealthy
	ChildRemoved   = supervisor.ChildRemoved
	Escalated      = supervisor.Escalated
	LeaderElected  = supervisor.LeaderElected
	LeaderLost     = supervisor.LeaderLost
	ShardAcquired  = supervisor.ShardAcquired
	ShardReleased  = supervisor.ShardReleased
	ShardLost      = supervisor.ShardLost
	EventsDropped  = supervisor.EventsDropped
)

// Phase is where a manager is in its life, one of the constants below, in
// Status.Phase and Event.Phase; the moves between them are documented in
// package supervisor (go doc supervisor.Phase).
type Phase = supervisor.Phase

// The phases, in order.
const (
	PhaseIdle         = supervisor.PhaseIdle
	PhaseInitializing = supervisor.PhaseInitializing
	PhaseElecting     = supervisor.PhaseElecting
	PhaseRecovering   = supervisor.PhaseRecovering
	PhaseStarting     = supervisor.PhaseStarting
	PhaseRunning      = supervisor.PhaseRunning
	PhaseShuttingDown = supervisor.PhaseShuttingDown
	PhaseStopped      = supervisor.PhaseStopped
	PhaseFailed       = supervisor.PhaseFailed
)

// Status is a snapshot of a manager, as Status returns it: its Phase,
// whether it leads (Leader, Identity, LeaderIdentity), why it stopped
// (Err), every child (Children, in the order added; Child finds one by
// name) and, with sharded leadership, every shard (Shards). The fields
// are documented at supervisor.Status (go doc supervisor.Status).
type Status = supervisor.Status

// ChildStatus is a snapshot of one child, an entry of Status.Children: its
// Name, Kind, State, Restarts and Failures, its last health (Healthy,
// Message), its LastError and when it entered its State (Since). The
// fields are documented at supervisor.ChildStatus (go doc
// supervisor.ChildStatus).
type ChildStatus = supervisor.ChildStatus

// ChildState is where a child is, ChildStatus.State: one of the constants
// below, documented at supervisor.ChildState.
type ChildState = supervisor.ChildState

// The states of a child.
const (
	StatePending    = supervisor.StatePending
	StateStarting   = supervisor.StateStarting
	StateRunning    = supervisor.StateRunning
	StateFailed     = supervisor.StateFailed
	StateBackingOff = supervisor.StateBackingOff
	StateStopping   = supervisor.StateStopping
	StateStopped    = supervisor.StateStopped
)

// ShardStatus is the state of one shard, with sharded leadership, an entry
// of Status.Shards: its Index, Lease, Holder as last observed, whether this
// replica holds it (Held), and the controllers pinned to it (Children).
// The fields are documented at supervisor.ShardStatus.
type ShardStatus = supervisor.ShardStatus

// PanicError is a panic in user code, recovered and turned into an error
// that names the child (Child, Kind), the call (Op) and carries what was
// passed to panic (Value) and the stack (Stack); match it with errors.As.
// The fields are documented at actors.PanicError.
type PanicError = actors.PanicError

// EscalationError is why a manager stopped after a child failed more often
// than its restart budget allows, as Err returns it: the Child, its Kind,
// its Restarts within the budget's Window, and its last failure (Err,
// which errors.Is and errors.As see). The fields are documented at
// supervisor.EscalationError.
type EscalationError = supervisor.EscalationError

// ReportFailure reports err as a failure of the controller (or webhook, or
// store) whose Run (Start, Recover) received ctx, from any goroutine, at any
// time: the supervisor restarts it as its strategy says. It returns false,
// doing nothing, when ctx did not come from a manager. Keep the function of
// FailureReporter instead when the context will not outlive Run.
func ReportFailure(ctx context.Context, err error) bool {
	return actors.ReportFailure(ctx, err)
}

// FailureReporter returns the function that reports a failure of the child
// whose Run (Start, Recover) received ctx. It stays valid after Run returns;
// reports of an incarnation that has since been stopped are ignored. ok is
// false when ctx did not come from a manager.
func FailureReporter(ctx context.Context) (report func(err error), ok bool) {
	return actors.FailureReporter(ctx)
}

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

// eventCorrelation bounds what the manager's own recorder sends, so that a
// crash-looping child cannot flood the API server. These are client-go's
// defaults, written out so that they are stated here and stay put, but for
// the spam filter's key, which has the reason too:
//   - spam filter: per source, involved object, event type and reason, a
//     token bucket of 25 events refilled at one per 5 minutes: a loop yields
//     25 ChildFailed Warnings, then one every 5 minutes. client-go's key
//     leaves the reason out, so a crash loop would use up the bucket of
//     every Warning on the Pod, and the LeaderLost or Escalated that
//     follows it would be dropped;
//   - aggregation: an Event repeated with the same message is one Event
//     whose count grows (a PATCH, not a new object); past 10 Events of one
//     reason with different messages within 10 minutes, they are combined
//     into one "(combined from similar events)" Event;
//   - 4096 keys in each LRU cache.
var eventCorrelation = record.CorrelatorOptions{
	LRUCacheSize:         4096,
	BurstSize:            25,
	QPS:                  1. / 300.,
	MaxEvents:            10,
	MaxIntervalInSeconds: 600,
	SpamKeyFunc:          spamKey,
}

// spamKey is client-go's spam key (source, involved object, type) and the
// reason.
func spamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type, e.Reason}, "\x00")
}

// eventFlushTimeout bounds how long a manager that stops waits for its own
// recorder to write the Events it has queued before shutting it down. The
// clientset's client-side rate limit (client-go's default: 5 requests a
// second, bursts of 10) can hold a backlog of a few seconds after a burst of
// failures; the wait ends as soon as the backlog is written.
const eventFlushTimeout = 5 * time.Second

// maxEventMessage caps an Event's message (events.k8s.io caps its note at
// 1kB).
const maxEventMessage = 1024

// flushAnnotation marks the Event a stopping manager sends through its own
// recorder: the sink answers it without an API call once every Event before
// it has been written.
const flushAnnotation = "controllermanager.actorkube.io/flush"

// kubeEvents records a manager's Kubernetes Events. It is nil when the
// manager records none.
type kubeEvents struct {
	logger    *slog.Logger
	object    *corev1.ObjectReference // what the supervision Events are about; nil: the lock's only
	identity  string
	lease     string               // "<ns>/<name>", or empty
	host      record.EventRecorder // WithEventRecorder
	client    kubernetes.Interface // for the manager's own recorder; nil with host
	component string

	current atomic.Pointer[recorderRef] // what records now: host, or the own one once started

	stopOnce    sync.Once
	broadcaster record.EventBroadcaster // the own recorder's; nil with host
	sink        *flushSink
	flushRef    *corev1.ObjectReference
}

type recorderRef struct{ record.EventRecorder }

// newKubeEvents returns the Events of a manager whose lease is
// namespace/name (both empty with election off), or nil when it records
// none: no WithEventRecorder, and no clientset or no election.
func newKubeEvents(o options, client kubernetes.Interface, namespace, name, identity string) *kubeEvents {
	if o.recorder == nil && (client == nil || name == "") {
		return nil
	}
	k := &kubeEvents{logger: o.logger, identity: identity, host: o.recorder, component: name}
	if o.recorder == nil {
		k.client = client
	} else {
		k.current.Store(&recorderRef{o.recorder})
	}
	if name != "" {
		k.lease = namespace + "/" + name
		k.object = &corev1.ObjectReference{Kind: "Lease", APIVersion: coordinationv1.SchemeGroupVersion.String(), Namespace: namespace, Name: name}
	}
	if pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE"); pod != "" && ns != "" {
		k.object = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod, UID: types.UID(os.Getenv("POD_UID"))}
	}
	if k.object == nil {
		o.logger.Warn("WithEventRecorder: no Events will be recorded: there is no Lease and POD_NAME or POD_NAMESPACE is not set")
	}
	return k
}

// lockRecorder is the recorder of the Lease lock: client-go's own leader
// election Events go through the manager's recorder once it records.
func (k *kubeEvents) lockRecorder() resourcelock.EventRecorder {
	if k == nil {
		return nil
	}
	return lockRecorder{k}
}

type lockRecorder struct{ k *kubeEvents }

// Eventf records through the manager's recorder, once there is one.
func (l lockRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	if r := l.k.current.Load(); r != nil {
		r.Eventf(obj, eventType, reason, message, args...)
	}
}

// start makes the manager's own recorder, unless the host gave one.
func (k *kubeEvents) start() {
	if k == nil || k.client == nil {
		return
	}
	logger := logr.FromSlogHandler(k.logger.With("component", "events").Handler())
	k.broadcaster = record.NewBroadcaster(
		record.WithContext(klog.NewContext(context.Background(), logger)),
		record.WithCorrelatorOptions(eventCorrelation))
	k.sink = &flushSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: k.client.CoreV1().Events("")},
		flushed:   make(chan struct{}, 1),
	}
	k.broadcaster.StartRecordingToSink(k.sink)
	own := k.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: k.component, Host: k.identity}).WithLogger(logger)
	k.flushRef = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "flush", UID: types.UID(uuid.NewString())}
	k.current.Store(&recorderRef{own})
}

// record records e, if it is one of the Events.
func (k *kubeEvents) record(e Event) {
	if k == nil || k.object == nil {
		return
	}
	r := k.current.Load()
	if r == nil {
		return
	}
	switch e.Type {
	case LeaderElected:
		r.Eventf(k.object, corev1.EventTypeNormal, EventReasonLeaderElected, "%s", cap1k(fmt.Sprintf("%s became leader of Lease %s", k.identity, k.lease)))
	case LeaderLost:
		r.Eventf(k.object, corev1.EventTypeWarning, EventReasonLeaderLost, "%s", cap1k(fmt.Sprintf("%s lost Lease %s: %v", k.identity, k.lease, e.Err)))
	case ShardAcquired:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeNormal, EventReasonShardAcquired, "%s",
			cap1k(fmt.Sprintf("%s acquired shard %d, Lease %s-%d", k.identity, e.Shard, k.lease, e.Shard)))
	case ShardReleased:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeNormal, EventReasonShardReleased, "%s",
			cap1k(fmt.Sprintf("%s handed shard %d over, Lease %s-%d", k.identity, e.Shard, k.lease, e.Shard)))
	case ShardLost:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeWarning, EventReasonShardLost, "%s",
			cap1k(fmt.Sprintf("%s lost shard %d: %v", k.identity, e.Shard, e.Err)))
	case Escalated:
		r.Eventf(k.object, corev1.EventTypeWarning, EventReasonEscalated, "%s", cap1k(fmt.Sprint(e.Err)))
	case ChildFailed:
		// The failure names the child. No restart count in the message: a
		// child failing the same way again is the same Event, counted, not
		// a new one.
		r.Eventf(k.object, corev1.EventTypeWarning, EventReasonChildFailed, "%s", cap1k(fmt.Sprint(e.Err)))
	}
}

// shardObject is what a shard's Event is about: this replica's Pod, else
// the shard's Lease.
func (k *kubeEvents) shardObject(i int) *corev1.ObjectReference {
	if k.object.Kind != "Lease" {
		return k.object
	}
	o := *k.object
	o.Name = fmt.Sprintf("%s-%d", o.Name, i)
	return &o
}

// stop writes what the own recorder has queued, within eventFlushTimeout,
// then shuts it down. It is called once the manager has stopped.
func (k *kubeEvents) stop() {
	if k == nil || k.broadcaster == nil {
		return
	}
	k.stopOnce.Do(func() {
		if r := k.current.Load(); r != nil {
			r.AnnotatedEventf(k.flushRef, map[string]string{flushAnnotation: "true"}, corev1.EventTypeNormal, "Flush", "flush")
		}
		timer := time.NewTimer(eventFlushTimeout)
		defer timer.Stop()
		select {
		case <-k.sink.flushed:
		case <-timer.C:
			k.logger.Warn("Kubernetes Events: not every queued Event was written before the manager stopped", "waited", eventFlushTimeout)
		}
		k.broadcaster.Shutdown()
	})
}

// flushSink writes Events to the API server, and answers the flush marker
// itself.
type flushSink struct {
	record.EventSink
	flushed chan struct{}
}

// Create creates event, or signals the flush when event is the marker.
func (s *flushSink) Create(event *corev1.Event) (*corev1.Event, error) {
	if _, marker := event.Annotations[flushAnnotation]; marker {
		select {
		case s.flushed <- struct{}{}:
		default:
		}
		return event, nil
	}
	return s.EventSink.Create(event)
}

func cap1k(s string) string {
	if len(s) <= maxEventMessage {
		return s
	}
	cut := maxEventMessage - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// observe subscribes the manager's own bookkeeping to its events: the
// panics metric and the Kubernetes Events. It runs on a subscriber's
// goroutine of its own (Subscribe), so it never stalls supervision; once the
// manager has stopped it flushes the Events. Called by start, once.
func (m *BaseManager) observe() {
	m.events.start()
	seen := make(chan struct{})
	var once sync.Once
	finish := func() {
		once.Do(func() {
			m.events.stop()
			close(seen)
		})
	}
	cancel := m.Subscribe(func(e Event) {
		m.metrics.observeEvent(e)
		m.events.record(e)
		if e.Type == PhaseChanged && e.Phase.Ended() {
			finish()
		}
	})
	if m.events == nil || m.events.broadcaster == nil {
		return
	}
	// Should the terminal event never come to this subscriber (the manager
	// stopped before it subscribed), the recorder is shut down all the same.
	go func() {
		<-m.handle.Observed.Terminated()
		timer := time.NewTimer(eventFlushTimeout)
		defer timer.Stop()
		select {
		case <-seen:
		case <-timer.C:
			cancel()
			finish()
		}
	}()
}
