// Package kubeevents records a manager's supervision events as Kubernetes
// Events, through the host's recorder or one of the manager's own, with
// client-go's correlation (spam filter, aggregation) bounded so that a
// crash-looping child cannot flood the API server, and a flush on stop.
// The root package's kubeevents.go documents what is recorded.
package kubeevents

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

	"github.com/actorkube/controllermanager/supervisor"
)

// The reasons of the Events: the root package's EventReason* constants,
// where each is documented, are the same strings (a test of the root
// checks that they agree).
const (
	ReasonLeaderElected = "LeaderElected"
	ReasonLeaderLost    = "LeaderLost"
	ReasonEscalated     = "Escalated"
	ReasonChildFailed   = "ChildFailed"
	ReasonShardAcquired = "ShardAcquired"
	ReasonShardReleased = "ShardReleased"
	ReasonShardLost     = "ShardLost"
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

// FlushTimeout bounds how long a manager that stops waits for its own
// recorder to write the Events it has queued before shutting it down. The
// clientset's client-side rate limit (client-go's default: 5 requests a
// second, bursts of 10) can hold a backlog of a few seconds after a burst of
// failures; the wait ends as soon as the backlog is written.
const FlushTimeout = 5 * time.Second

// maxEventMessage caps an Event's message (events.k8s.io caps its note at
// 1kB).
const maxEventMessage = 1024

// flushAnnotation marks the Event a stopping manager sends through its own
// recorder: the sink answers it without an API call once every Event before
// it has been written.
const flushAnnotation = "controllermanager.actorkube.io/flush"

// Recorder records a manager's Kubernetes Events. A nil *Recorder records
// none; every method is a no-op on it.
type Recorder struct {
	logger    *slog.Logger
	object    *corev1.ObjectReference // what the supervision Events are about; nil: the lock's only
	identity  string
	lease     string               // "<ns>/<name>", or empty
	host      record.EventRecorder // the host's (WithEventRecorder)
	client    kubernetes.Interface // for the manager's own recorder; nil with host
	component string

	current atomic.Pointer[recorderRef] // what records now: host, or the own routine lane once started
	urgent  atomic.Pointer[recorderRef] // what records the loss's Events: host, or the own urgent lane

	stopOnce sync.Once
	// routine and urgent are the own recorder's two lanes (nil with host):
	// the loss's Events (urgent: LeaderLost, ShardLost, Escalated) are
	// written by a writer of their own, so that they never wait behind a
	// backlog of routine ones on a clientset's rate limit.
	routine, urgentLane *lane
	flushRef            *corev1.ObjectReference
	onDrop              func(reason string, n int)
}

// lane is one broadcaster of the manager's own recorder and its writer
// (client-go's StartRecordingToSink: one goroutine, first in first out,
// each write waiting on the clientset's rate limit), with what it was
// handed and what its writer took up, by reason: an Event handed and never
// taken up when the lane shuts down is dropped.
type lane struct {
	name        string
	broadcaster record.EventBroadcaster
	sink        *flushSink

	mu            sync.Mutex
	handed, taken map[string]int
}

func (l *lane) hand(reason string) {
	l.mu.Lock()
	l.handed[reason]++
	l.mu.Unlock()
}

func (l *lane) take(reason string) {
	l.mu.Lock()
	l.taken[reason]++
	l.mu.Unlock()
}

// untaken returns, by reason, the Events handed to l that its writer never
// took up.
func (l *lane) untaken() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for reason, n := range l.handed {
		if left := n - l.taken[reason]; left > 0 {
			out[reason] = left
		}
	}
	return out
}

// countingRecorder is a lane's recorder: it counts what it is handed.
type countingRecorder struct {
	record.EventRecorder
	lane *lane
}

func (r countingRecorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.lane.hand(reason)
	r.EventRecorder.Event(object, eventtype, reason, message)
}

func (r countingRecorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.lane.hand(reason)
	r.EventRecorder.Eventf(object, eventtype, reason, messageFmt, args...)
}

type recorderRef struct{ record.EventRecorder }

// Config says what a manager's Events are about and how they are sent.
type Config struct {
	// Logger logs what cannot be recorded.
	Logger *slog.Logger
	// Host is the host's recorder (WithEventRecorder); nil: the manager
	// makes its own over Client.
	Host record.EventRecorder
	// Client is the clientset of the manager's own recorder; unused with
	// Host.
	Client kubernetes.Interface
	// Namespace and Name are the Lease's; both empty with election off.
	Namespace, Name string
	// Identity is this replica's holder identity, the Events' source host.
	Identity string
}

// New returns the Recorder of a manager configured by c, or nil when it
// records none: no Host, and no Client or no Lease. The Events are about
// this replica's Pod (POD_NAME, POD_NAMESPACE, POD_UID), else the Lease.
func New(c Config) *Recorder {
	if c.Host == nil && (c.Client == nil || c.Name == "") {
		return nil
	}
	k := &Recorder{logger: c.Logger, identity: c.Identity, host: c.Host, component: c.Name}
	if c.Host == nil {
		k.client = c.Client
	} else {
		k.current.Store(&recorderRef{c.Host})
		k.urgent.Store(&recorderRef{c.Host})
	}
	if c.Name != "" {
		k.lease = c.Namespace + "/" + c.Name
		k.object = &corev1.ObjectReference{Kind: "Lease", APIVersion: coordinationv1.SchemeGroupVersion.String(), Namespace: c.Namespace, Name: c.Name}
	}
	if pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE"); pod != "" && ns != "" {
		k.object = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: pod, UID: types.UID(os.Getenv("POD_UID"))}
	}
	if k.object == nil {
		c.Logger.Warn("WithEventRecorder: no Events will be recorded: there is no Lease and POD_NAME or POD_NAMESPACE is not set")
	}
	return k
}

// Flushes reports whether Stop has a queue of the manager's own recorder to
// flush: the recorder started, and the host gave none.
func (k *Recorder) Flushes() bool { return k != nil && k.routine != nil }

// OnDrop has fn called, when the manager's own recorder stops, with the
// number of Events of each reason that it dropped: handed to it, and still
// queued, never taken up by its writer, once Stop's flush had waited
// FlushTimeout. Call it before Start.
func (k *Recorder) OnDrop(fn func(reason string, n int)) {
	if k != nil {
		k.onDrop = fn
	}
}

// LockRecorder is the recorder of the Lease lock: client-go's own leader
// election Events go through the manager's recorder once it records.
func (k *Recorder) LockRecorder() resourcelock.EventRecorder {
	if k == nil {
		return nil
	}
	return lockRecorder{k}
}

type lockRecorder struct{ k *Recorder }

// Eventf records through the manager's recorder, once there is one.
func (l lockRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	if r := l.k.current.Load(); r != nil {
		r.Eventf(obj, eventType, reason, message, args...)
	}
}

// Start makes the manager's own recorder, unless the host gave one.
func (k *Recorder) Start() {
	if k == nil || k.client == nil {
		return
	}
	logger := logr.FromSlogHandler(k.logger.With("component", "events").Handler())
	k.flushRef = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "flush", UID: types.UID(uuid.NewString())}
	var routine, urgent record.EventRecorder
	k.routine, routine = k.newLane("routine", logger)
	k.urgentLane, urgent = k.newLane("urgent", logger)
	k.urgent.Store(&recorderRef{urgent})
	k.current.Store(&recorderRef{routine})
}

// newLane starts a broadcaster writing to the clientset, and returns it
// with its recorder. Each lane has its own correlator: the spam filter and
// the aggregation key on the reason, and a reason has one lane, so they
// count as they would with one.
func (k *Recorder) newLane(name string, logger logr.Logger) (*lane, record.EventRecorder) {
	l := &lane{name: name, handed: map[string]int{}, taken: map[string]int{}}
	correlation := eventCorrelation
	correlation.SpamKeyFunc = func(e *corev1.Event) string {
		l.take(e.Reason) // called once for every Event the writer takes up
		return spamKey(e)
	}
	l.broadcaster = record.NewBroadcaster(
		record.WithContext(klog.NewContext(context.Background(), logger)),
		record.WithCorrelatorOptions(correlation))
	l.sink = &flushSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: k.client.CoreV1().Events("")},
		flushed:   make(chan struct{}, 1),
	}
	l.broadcaster.StartRecordingToSink(l.sink)
	own := l.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: k.component, Host: k.identity}).WithLogger(logger)
	return l, countingRecorder{EventRecorder: own, lane: l}
}

// Record records e, if it is one of the Events.
func (k *Recorder) Record(e supervisor.Event) {
	if k == nil || k.object == nil {
		return
	}
	r := k.current.Load()
	switch e.Type {
	case supervisor.LeaderLost, supervisor.ShardLost, supervisor.Escalated:
		// A loss's Events: what an operator needs first when a replica
		// stops leading, and what a manager stopping on the loss must not
		// leave queued behind routine ones.
		r = k.urgent.Load()
	}
	if r == nil {
		return
	}
	switch e.Type {
	case supervisor.LeaderElected:
		r.Eventf(k.object, corev1.EventTypeNormal, ReasonLeaderElected, "%s", cap1k(fmt.Sprintf("%s became leader of Lease %s", k.identity, k.lease)))
	case supervisor.LeaderLost:
		r.Eventf(k.object, corev1.EventTypeWarning, ReasonLeaderLost, "%s", cap1k(fmt.Sprintf("%s lost Lease %s: %v", k.identity, k.lease, e.Err)))
	case supervisor.ShardAcquired:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeNormal, ReasonShardAcquired, "%s",
			cap1k(fmt.Sprintf("%s acquired shard %d, Lease %s-%d", k.identity, e.Shard, k.lease, e.Shard)))
	case supervisor.ShardReleased:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeNormal, ReasonShardReleased, "%s",
			cap1k(fmt.Sprintf("%s handed shard %d over, Lease %s-%d", k.identity, e.Shard, k.lease, e.Shard)))
	case supervisor.ShardLost:
		r.Eventf(k.shardObject(e.Shard), corev1.EventTypeWarning, ReasonShardLost, "%s",
			cap1k(fmt.Sprintf("%s lost shard %d: %v", k.identity, e.Shard, e.Err)))
	case supervisor.Escalated:
		r.Eventf(k.object, corev1.EventTypeWarning, ReasonEscalated, "%s", cap1k(fmt.Sprint(e.Err)))
	case supervisor.ChildFailed:
		// The failure names the child. No restart count in the message: a
		// child failing the same way again is the same Event, counted, not
		// a new one.
		r.Eventf(k.object, corev1.EventTypeWarning, ReasonChildFailed, "%s", cap1k(fmt.Sprint(e.Err)))
	}
}

// shardObject is what a shard's Event is about: this replica's Pod, else
// the shard's Lease.
func (k *Recorder) shardObject(i int) *corev1.ObjectReference {
	if k.object.Kind != "Lease" {
		return k.object
	}
	o := *k.object
	o.Name = fmt.Sprintf("%s-%d", o.Name, i)
	return &o
}

// Stop writes what the own recorder has queued, within FlushTimeout for
// both lanes together, then shuts it down, and reports (OnDrop, and the
// log) the Events it dropped: those still queued, never taken up by a
// writer. It is called once the manager has stopped.
func (k *Recorder) Stop() {
	if k == nil || k.routine == nil {
		return
	}
	k.stopOnce.Do(func() {
		lanes := []*lane{k.urgentLane, k.routine}
		for _, l := range lanes {
			l.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: k.component, Host: k.identity}).
				AnnotatedEventf(k.flushRef, map[string]string{flushAnnotation: "true"}, corev1.EventTypeNormal, "Flush", "flush")
		}
		timer := time.NewTimer(FlushTimeout)
		defer timer.Stop()
		expired := false
		for _, l := range lanes {
			if !expired {
				select {
				case <-l.sink.flushed:
					continue
				case <-timer.C:
					expired = true
				}
			}
			select {
			case <-l.sink.flushed:
			default:
				k.logger.Warn("Kubernetes Events: not every queued Event was written before the manager stopped", "lane", l.name, "waited", FlushTimeout)
			}
		}
		dropped := map[string]int{}
		for _, l := range lanes {
			l.broadcaster.Shutdown()
			for reason, n := range l.untaken() {
				dropped[reason] += n
			}
		}
		for reason, n := range dropped {
			k.logger.Warn("Kubernetes Events dropped: still queued when the manager stopped", "reason", reason, "count", n)
			if k.onDrop != nil {
				k.onDrop(reason, n)
			}
		}
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

// cap1k cuts s to maxEventMessage bytes, on a rune boundary, marking the
// cut with an ellipsis.
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
