package controllermanager

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
	"github.com/actorkube/controllermanager/supervisor"
)

// election is a ControllerManager's leader election, ready to run: one
// lease/shard Elector, of S shard Leases or, with one lease, in its
// single-lease mode (the Lease named leaseName, shard 0), watched through
// the clientset or polled through WithLeaseLock's lock.
type election struct {
	shards  int            // 1: the single lease
	elector *shard.Elector // props spawns its actor

	name         string // the Lease's name (the group's, with shards)
	identity     string // this replica's holder identity
	props        *actor.Props
	watchdog     *lease.Watchdog
	fenceTimeout time.Duration // the Elector's FenceTimeout
	reelect      bool
	events       *kubeEvents // nil: no Kubernetes Events
}

// newElection validates spec and builds the elector. It returns nil, nil
// when election is off, and reports every problem at once, a missing
// clientset included.
func newElection(ctrlContext Context, spec *LeaderElectionSpec, defaultLeaseName string, o options) (*election, error) {
	c, err := spec.election(defaultLeaseName)
	if c == nil && err == nil {
		return nil, nil
	}
	if c != nil && c.shards > 1 && o.lock != nil {
		err = errors.Join(err, fmt.Errorf("leaderElection.shards: %d shards need a clientset to watch their Leases; WithLeaseLock gives one lock (use WithLeaderElectionClient)", c.shards))
	}
	client := o.leClient
	if client == nil && ctrlContext != nil {
		client = ctrlContext.Kubernetes()
	}
	if o.lock == nil && client == nil {
		err = errors.Join(err, errors.New("leaderElection.enabled: leader election needs a Kubernetes clientset (Context.Kubernetes() is nil), WithLeaderElectionClient or WithLeaseLock"))
	}
	if err != nil {
		return nil, err
	}
	identity := o.identity
	if o.lock != nil {
		identity = o.lock.Identity()
	}
	if identity == "" {
		identity = lease.NewIdentity()
	}
	scfg := shard.Config{
		Client: client, Namespace: c.namespace, Name: c.name, Identity: identity, Shards: c.shards,
		LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Logger: o.logger.With("component", "leaderelection"),
	}
	if o.clock != nil {
		scfg.Clock = o.clock
	}
	events := newKubeEvents(o, client, c.namespace, c.name, identity)
	if c.shards <= 1 {
		// The single lease: shard 0 of the Elector, on client-go's Lease
		// record. Its "became leader" and "stopped leading" Events are
		// the ones client-go's LeaderElector recorded through the lock
		// (reason LeaderElection, on the Lease), as before.
		scfg.SingleLease, scfg.Shards = true, 1
		if o.lock != nil {
			scfg.Lock, scfg.Client = o.lock, nil // WithLeaseLock takes precedence: polled
			scfg.RecordEvent = o.lock.RecordEvent
		} else if rec := events.lockRecorder(); rec != nil {
			scfg.RecordEvent = func(message string) { recordLeaderElection(rec, c.namespace, c.name, identity, message) }
		}
	}
	e, err := shard.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("leaderElection: %w", err)
	}
	return &election{
		shards: scfg.Shards, elector: e, name: c.name, identity: identity, props: shard.Props(e),
		// The watchdog tolerates a renew deadline past the lease's
		// expiry: a live elector reports Lost long before.
		watchdog: lease.NewWatchdogFor(c.renewDeadline, e.Check), reelect: c.reelect,
		fenceTimeout: scfg.FenceTimeout(), events: events,
	}, nil
}

// recordLeaderElection records the Event client-go's LeaseLock.RecordEvent
// records for its LeaderElector: reason LeaderElection, on the Lease,
// "<identity> <message>".
func recordLeaderElection(rec resourcelock.EventRecorder, namespace, name, identity, message string) {
	subject := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	subject.Kind, subject.APIVersion = "Lease", coordinationv1.SchemeGroupVersion.String()
	rec.Eventf(subject, corev1.EventTypeNormal, "LeaderElection", "%s", identity+" "+message)
}

// sharded reports whether leadership is split into shards.
func (e *election) sharded() bool { return e.shards > 1 }

// configure sets the election part of a root supervisor's config; a nil
// election leaves it off. A controller's guard is its shard's (the single
// lease's: shard 0), a store's passes while some shard's does.
func (e *election) configure(cfg *supervisor.Config) {
	if e == nil {
		return
	}
	el, n, name := e.elector, e.shards, e.name
	cfg.Elector = e.props
	cfg.Identity = e.identity
	cfg.FenceTimeout = e.fenceTimeout
	cfg.Reelect = e.reelect
	cfg.Guards = func(spec actors.Spec) func() error {
		if spec.Kind == actors.KindController || !e.sharded() {
			return el.Guard(spec.Shard)
		}
		return e.anyShard
	}
	if !e.sharded() {
		return
	}
	cfg.Shards = n
	cfg.ShardLease = func(i int) string { return shard.ShardLease(name, i) }
	cfg.ShardOf = func(child string) int { return ShardOf(child, n) }
	cfg.ShardHolders = func() []string {
		st := el.Status()
		holders := make([]string, len(st))
		for i, s := range st {
			holders[i] = s.Holder
		}
		return holders
	}
}

// anyShard is nil while this replica can prove it holds some shard (the
// single lease: the lease).
func (e *election) anyShard() error { return e.elector.CheckAny() }

// LeaseWatchdog returns the health check of this manager's leader election,
// in the manner of client-go's HealthzAdaptor: its Check fails while this
// replica believes it leads but has not renewed the lease for longer than
// the lease duration plus the renew deadline (a stuck election; a live one
// reports the loss, and the manager fences, well before). Its Name is
// "leaderElection". Plug it into a liveness probe, so that the kubelet
// restarts such a process. Nil when election is off (a nil *lease.Watchdog
// is a check that always passes).
func (m *ControllerManager) LeaseWatchdog() *lease.Watchdog {
	if m.election == nil {
		return nil
	}
	return m.election.watchdog
}

// kubeEvents returns the manager's Kubernetes Events: the election's, or,
// with election off, the host's recorder's (WithEventRecorder) if any.
func (e *election) kubeEvents(o options) *kubeEvents {
	if e != nil {
		return e.events
	}
	host, err := os.Hostname()
	if err != nil {
		host = ""
	}
	return newKubeEvents(o, nil, "", "", host)
}

// WithLeaderElectionClient gives leader election a clientset of its own for
// the Lease. Default: Context.Kubernetes(), the controllers' clientset.
//
// Give it one: client-go's rate limiter belongs to a clientset (5 requests
// per second, burst 10, unless the rest.Config says otherwise), so on a
// shared clientset a busy controller queues the lease's renewals behind its
// own requests, and a renewal that waits past the renew deadline loses the
// lease. kube-controller-manager builds its leader-election client the same
// way, from a copy of its config:
//
//	electionClient := kubernetes.NewForConfigOrDie(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
//
// A new clientset has a rate limiter of its own (its config's QPS and
// Burst); WithLeaseLock, when given, takes precedence over this option.
//
// With sharded leadership it matters more: a replica writes the Leases it
// holds and its member Lease every RetryPeriod, (⌈S/R⌉ + 1) / RetryPeriod
// writes a second, all at once, plus the watch. Give the clientset a QPS and
// a Burst of at least ⌈S/R⌉ + 1 (a replica may briefly hold more after a
// crash of another: S + 1 is safe); with client-go's default 5 QPS, burst
// 10, 12 shards at a 500ms retry period did not settle in the e2e suite.
func WithLeaderElectionClient(client kubernetes.Interface) Option {
	return func(o *options) { o.leClient = client }
}
