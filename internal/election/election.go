// Package election wires a ControllerManager's leader election: one
// lease/shard Elector, of S shard Leases or, with one lease, in its
// single-lease mode (the Lease named Config.Name, shard 0, on client-go's
// Lease record and rules), watched through a clientset or polled through a
// client-go lock; the guards of the children the supervisor starts under
// it, the watchdog, and the LeaderElection Events client-go's LeaseLock
// recorded. The root package's election.go is a thin adapter over it: it
// validates the user's spec and hands the result here.
package election

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/elector"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
)

// Config is a validated election: every field but Client or Lock (one of
// them is required), Clock, Recorder and Logger is required.
type Config struct {
	// Client reaches the API server: the Leases are watched through it.
	Client kubernetes.Interface
	// Lock, with one lease only, replaces Client: the lock is polled every
	// RetryPeriod and written through (WithLeaseLock). Its Identity is the
	// replica's.
	Lock resourcelock.Interface
	// Namespace and Name name the Lease (with shards: the group).
	Namespace, Name string
	// Identity is this replica's holder identity; with Lock, Lock.Identity().
	Identity string
	// Shards is the number of shard Leases; 0 or 1 is the single lease.
	Shards int
	// LeaseDuration, RenewDeadline and RetryPeriod are the spec's.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Reelect: after a loss, campaign again rather than fail the manager.
	Reelect bool
	// ShardOf pins a controller to its shard (the root's ShardOf).
	ShardOf func(key string, count int) int
	// Recorder, with one lease and Client, receives client-go's
	// LeaderElection Events on the Lease; nil: none. With Lock, the lock
	// records its own.
	Recorder resourcelock.EventRecorder
	// Logger receives the elector's logs.
	Logger *slog.Logger
	// Clock is the elector's; nil: the real clock.
	Clock clock.WithTicker
}

// Election is a manager's leader election, ready to run.
type Election struct {
	cfg          Config
	elector      *shard.Elector
	props        *actor.Props
	watchdog     *lease.Watchdog
	fenceTimeout time.Duration
}

// New builds the Elector of cfg.
func New(cfg Config) (*Election, error) {
	if cfg.Client == nil && cfg.Lock == nil {
		return nil, errors.New("election: no clientset and no lock")
	}
	if cfg.Lock != nil {
		cfg.Identity = cfg.Lock.Identity()
	}
	scfg := shard.Config{
		Client: cfg.Client, Namespace: cfg.Namespace, Name: cfg.Name, Identity: cfg.Identity, Shards: cfg.Shards,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Logger: cfg.Logger, Clock: cfg.Clock,
	}
	if cfg.Shards <= 1 {
		cfg.Shards = 1
		scfg.SingleLease, scfg.Shards = true, 1
		switch {
		case cfg.Lock != nil:
			scfg.Lock, scfg.Client = cfg.Lock, nil // the lock takes precedence: polled
			scfg.RecordEvent = cfg.Lock.RecordEvent
		case cfg.Recorder != nil:
			rec, namespace, name, identity := cfg.Recorder, cfg.Namespace, cfg.Name, cfg.Identity
			scfg.RecordEvent = func(message string) { recordLeaderElection(rec, namespace, name, identity, message) }
		}
	}
	e, props, err := elector.New(scfg)
	if err != nil {
		return nil, err
	}
	return &Election{
		cfg: cfg, elector: e, props: props,
		// The watchdog tolerates a renew deadline past the lease's
		// expiry: a live elector reports Lost long before.
		watchdog:     lease.NewWatchdogFor(cfg.RenewDeadline, e.Check),
		fenceTimeout: scfg.FenceTimeout(),
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

// Identity is this replica's holder identity.
func (e *Election) Identity() string { return e.cfg.Identity }

// Shards is the number of shards: 1 for the single lease.
func (e *Election) Shards() int { return e.cfg.Shards }

// Sharded reports whether leadership is split into shards.
func (e *Election) Sharded() bool { return e.cfg.Shards > 1 }

// Watchdog is the election's liveness check.
func (e *Election) Watchdog() *lease.Watchdog { return e.watchdog }

// Configure sets the election part of a root supervisor's config. A
// controller's guard is its shard's (the single lease's: shard 0), a
// store's passes while some shard's does.
func (e *Election) Configure(cfg *supervise.Config) {
	el, n, name := e.elector, e.cfg.Shards, e.cfg.Name
	cfg.Elector = e.props
	cfg.Identity = e.cfg.Identity
	cfg.FenceTimeout = e.fenceTimeout
	cfg.Reelect = e.cfg.Reelect
	cfg.Guards = func(spec childactor.Spec) func() error {
		if spec.Kind == actors.KindController || !e.Sharded() {
			return el.Guard(spec.Shard)
		}
		return e.AnyShard
	}
	if !e.Sharded() {
		return
	}
	shardOf := e.cfg.ShardOf
	cfg.Shards = n
	cfg.ShardLease = func(i int) string { return shard.ShardLease(name, i) }
	cfg.ShardOf = func(child string) int { return shardOf(child, n) }
	cfg.ShardHolders = func() []string {
		st := el.Status()
		holders := make([]string, len(st))
		for i, s := range st {
			holders[i] = s.Holder
		}
		return holders
	}
}

// AnyShard is nil while this replica can prove it holds some shard (the
// single lease: the lease).
func (e *Election) AnyShard() error { return e.elector.CheckAny() }

// Guard is shard i's guard now (see shard.Elector.Guard).
func (e *Election) Guard(i int) func() error { return e.elector.Guard(i) }
