package controllermanager

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/client-go/kubernetes"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
	"github.com/actorkube/controllermanager/supervisor"
)

// election is a ControllerManager's leader election, ready to run.
type election struct {
	shards  int            // 1: the single lease
	sharded *shard.Elector // with shards > 1; props spawns its actor

	name              string // the Lease's name
	identity          string // this replica's holder identity
	props             *actor.Props
	watchdog          *lease.Watchdog
	leaseFence        *lease.Fence  // what the lease guards read
	fence             lease.Config  // for its FenceTimeout
	shardFenceTimeout time.Duration // the sharded election's FenceTimeout
	reelect           bool
	events            *kubeEvents // nil: no Kubernetes Events
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
	if c.shards > 1 {
		return newShardedElection(client, c, o)
	}
	lock := o.lock
	var events *kubeEvents
	if lock == nil {
		identity := o.identity
		if identity == "" {
			identity = lease.NewIdentity()
		}
		events = newKubeEvents(o, client, c.namespace, c.name, identity)
		if lock, err = lease.NewLeaseLockWithRecorder(client, c.namespace, c.name, identity, events.lockRecorder()); err != nil {
			return nil, err
		}
	} else {
		events = newKubeEvents(o, client, c.namespace, c.name, lock.Identity())
	}
	// The watchdog tolerates a renew deadline past the lease's expiry: a
	// live elector reports Lost long before.
	watchdog := lease.NewWatchdog(c.renewDeadline)
	fence := lease.NewFence()
	cfg := lease.Config{
		Lock: lock, LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Logger: o.logger.With("component", "leaderelection"), Watchdog: watchdog, Fence: fence,
	}
	if o.clock != nil {
		cfg.Clock = o.clock
	}
	props, err := lease.NewProps(cfg)
	if err != nil {
		return nil, fmt.Errorf("leaderElection: %w", err)
	}
	return &election{name: c.name, identity: lock.Identity(), props: props, watchdog: watchdog, fence: cfg, leaseFence: fence, reelect: c.reelect, events: events}, nil
}

// configure sets the election part of a root supervisor's config; a nil
// election leaves it off.
func (e *election) configure(cfg *supervisor.Config) {
	if e == nil {
		return
	}
	cfg.Elector = e.props
	cfg.Identity = e.identity
	cfg.FenceTimeout = e.fence.FenceTimeout()
	cfg.Reelect = e.reelect
	if e.sharded != nil {
		e.configureShards(cfg)
		return
	}
	fence := e.leaseFence
	cfg.Guards = func(actors.Spec) func() error { return fence.Guard() }
}

// newShardedElection builds the elector of S shard Leases (lease/shard): one
// watch of the group's Leases, renewals of the held ones only.
func newShardedElection(client kubernetes.Interface, c *electionConfig, o options) (*election, error) {
	identity := o.identity
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
	e, err := shard.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("leaderElection: %w", err)
	}
	return &election{
		shards: c.shards, sharded: e, name: c.name, identity: identity, props: shard.Props(e),
		watchdog: lease.NewWatchdogFor(c.renewDeadline, e.Check), reelect: c.reelect,
		shardFenceTimeout: scfg.FenceTimeout(), events: newKubeEvents(o, client, c.namespace, c.name, identity),
	}, nil
}

// configureShards sets the sharded election's part of a supervisor's config:
// a controller's guard is its shard's, a store's passes while some shard's
// does.
func (e *election) configureShards(cfg *supervisor.Config) {
	el, n, name := e.sharded, e.shards, e.name
	cfg.FenceTimeout = e.shardFenceTimeout
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
	cfg.Guards = func(spec actors.Spec) func() error {
		if spec.Kind == actors.KindController {
			return el.Guard(spec.Shard)
		}
		return e.anyShard
	}
}

// anyShard is nil while this replica can prove it holds some shard.
func (e *election) anyShard() error { return e.sharded.CheckAny() }

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
