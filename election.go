package controllermanager

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"

	elect "github.com/actorkube/controllermanager/internal/election"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/lease"
)

// election is a ControllerManager's leader election, ready to run: the
// wiring of internal/election (one lease/shard Elector, of S shard Leases
// or, with one lease, shard 0 in its single-lease mode), with what the root
// keeps of it.
type election struct {
	*elect.Election
	name     string // the Lease's name (the group's, with shards)
	shards   int    // 1: the single lease
	watchdog *lease.Watchdog
	events   *kubeEvents // nil: no Kubernetes Events
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
	// The manager's own Events go through the controllers' clientset, not
	// the one WithLeaderElectionClient gives the Lease: that one's rate
	// limiter is the renewals' own, and a wave of ShardLost and
	// ShardAcquired Events would spend it while renewals wait.
	evClient := client
	if ctrlContext != nil && ctrlContext.Kubernetes() != nil {
		evClient = ctrlContext.Kubernetes()
	}
	events := newKubeEvents(o, evClient, c.namespace, c.name, identity)
	ecfg := elect.Config{
		Client: client, Lock: o.lock, Namespace: c.namespace, Name: c.name, Identity: identity, Shards: c.shards,
		LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Reelect: c.reelect, ShardOf: ShardOf, Logger: o.logger.With("component", "leaderelection"),
	}
	if rec := events.lockRecorder(); rec != nil {
		ecfg.Recorder = rec
	}
	if o.clock != nil {
		ecfg.Clock = o.clock
	}
	el, err := elect.New(ecfg)
	if err != nil {
		return nil, fmt.Errorf("leaderElection: %w", err)
	}
	return &election{Election: el, name: c.name, shards: el.Shards(), watchdog: el.Watchdog(), events: events}, nil
}

// configure sets the election part of a root supervisor's config; a nil
// election leaves it off.
func (e *election) configure(cfg *supervise.Config) {
	if e != nil {
		e.Configure(cfg)
	}
}

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
// the Lease. Default: Context.Kubernetes(), the controllers' clientset. The
// manager's own Kubernetes Events (LeaderElected, ShardLost, ...) go through
// Context.Kubernetes() whenever it is set, so that they never spend this
// clientset's rate limit.
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
