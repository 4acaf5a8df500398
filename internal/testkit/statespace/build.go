package statespace

import (
	"context"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8stesting "k8s.io/client-go/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

func (r *runner) build() error {
	spec := cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
		Strategy: r.sc.Strategy, MaxRestarts: MaxRestarts, RestartWindow: metav1.Duration{Duration: RestartWindow},
		InitialBackoff: metav1.Duration{Duration: r.sc.initialBackoff()}, MaxBackoff: metav1.Duration{Duration: r.sc.maxBackoff()},
		HealthInterval: metav1.Duration{Duration: HealthInterval}, HealthTimeout: metav1.Duration{Duration: HealthTimeout},
		UnhealthyThreshold: UnhealthyThreshold, ShutdownTimeout: metav1.Duration{Duration: ShutdownTimeout},
	}}
	var kube kubernetes.Interface
	if r.sc.Election != ElectionOff {
		yes := true
		spec.LeaderElection = &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: leaseName, LeaseNamespace: namespace,
			LeaseDuration: metav1.Duration{Duration: LeaseDuration}, RenewDeadline: metav1.Duration{Duration: RenewDeadline},
			RetryPeriod: metav1.Duration{Duration: RetryPeriod}, OnLeaseLost: cm.LeaseLostAction(r.sc.Election),
			Shards: int32(r.sc.Shards),
		}
		r.srv = leasetest.NewServer()
		r.client = r.srv.Client(identity)
		// Slow API: every lease call waits first, then goes on to the fake
		// server's own reactor.
		r.client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if d := time.Duration(r.latency.Load()); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-r.release:
				}
				timer.Stop()
			}
			return false, nil, nil
		})
		if d := r.sc.WriteLatency; d > 0 {
			r.client.SetLatency(leasetest.Latency{Verbs: map[string]time.Duration{"create": d, "update": d}, Jitter: d / 10})
		}
		kube = stallingClient{Client: r.client, stalled: &r.stalled, dropped: &r.dropped, listsHung: &r.listsHung}
	}
	m, err := cm.NewControllerManager(preflight{kube: kube, delay: r.sc.PreflightDelay, release: r.release}, spec, "",
		cm.WithIdentity(identity), cm.WithLogger(r.cfg.Logger), cm.WithEventBuffer(1<<16))
	if err != nil {
		return err
	}
	r.m = m
	m.Subscribe(r.onEvent)
	go func() {
		select {
		case <-m.Done():
			r.mu.Lock()
			r.doneAt = time.Now()
			if r.exitAt.IsZero() {
				r.exitAt = r.doneAt
			}
			r.mu.Unlock()
		case <-r.doneWatch:
		}
	}()
	if len(r.sc.Groups) > 0 {
		r.buildTree()
		if r.sc.Fleet > 0 {
			r.addFleet()
		}
		return nil
	}
	stores, ctrls, hooks := r.sc.names()
	for _, name := range stores {
		c := newChild(name, "store", r.journal, r.release)
		r.children[name] = c
		m.AddStore(Store{c})
	}
	for _, name := range ctrls {
		c := newChild(name, "controller", r.journal, r.release)
		r.children[name] = c
		m.Add(Controller{c})
	}
	for _, name := range hooks {
		c := newChild(name, "webhook", r.journal, r.release)
		r.children[name] = c
		m.Add(Webhook{c})
	}
	if r.sc.Fleet > 0 {
		r.addFleet()
	}
	return nil
}

// buildTree adds a tree scenario's children: the root's stores, then its
// controllers, groups and webhooks in one Add, each group built depth
// first.
func (r *runner) buildTree() {
	var node func(parent, name string) cm.Runnable
	node = func(parent, name string) cm.Runnable {
		path := name
		if parent != "" {
			path = parent + "/" + name
		}
		if g, ok := r.sc.group(path); ok {
			children := make([]cm.Runnable, len(g.Children))
			for i, c := range g.Children {
				children[i] = node(path, c)
			}
			return cm.NewGroup(g.Name(), g.spec(), children...)
		}
		return r.newRunnable(path, kindOf(name), Knobs{})
	}
	stores, others := r.sc.rootChildren()
	r.order[""] = append(slices.Clone(stores), others...)
	for _, g := range r.sc.Groups {
		r.order[g.Path] = slices.Clone(g.Children)
	}
	for _, name := range stores {
		r.m.AddStore(r.newRunnable(name, "store", Knobs{}).(Store))
	}
	vals := make([]cm.Runnable, len(others))
	for i, name := range others {
		vals[i] = node("", name)
	}
	r.m.Add(vals...)
	// The groups of one AddShardedGroup, after every other child of the
	// root: "sg-<i>" for shard i, its controllers pinned to it.
	var sharded []Group
	for _, g := range r.sc.Groups {
		if g.Sharded {
			sharded = append(sharded, g)
			r.order[""] = append(r.order[""], g.Path)
		}
	}
	if len(sharded) == 0 {
		return
	}
	spec := sharded[0]
	r.m.AddShardedGroup("sg", spec.spec(),
		func(sh cm.Shard) []cm.Runnable {
			g := sharded[sh.Index]
			children := make([]cm.Runnable, len(g.Children))
			for i, c := range g.Children {
				children[i] = r.newRunnable(g.Path+"/"+c, kindOf(c), Knobs{})
			}
			return children
		})
}

// kindOf is the kind of an initial child by its name.
func kindOf(name string) string {
	switch {
	case strings.HasPrefix(name, "store-"):
		return "store"
	case strings.HasPrefix(name, "hook-"):
		return "webhook"
	}
	return "controller"
}

// newRunnable makes the journalling child at path, of kind, and records
// it.
func (r *runner) newRunnable(path, kind string, k Knobs) cm.Runnable {
	c := newChild(path, kind, r.journal, r.release)
	c.knobs = k
	r.mu.Lock()
	r.children[path] = c
	r.mu.Unlock()
	switch kind {
	case "store":
		return Store{c}
	case "webhook":
		return Webhook{c}
	}
	return Controller{c}
}

// preflight is the manager's Context: its Start takes delay.
type preflight struct {
	kube    kubernetes.Interface
	delay   time.Duration
	release <-chan struct{}
}

func (p preflight) Start(ctx context.Context) error {
	if p.delay <= 0 {
		return nil
	}
	timer := time.NewTimer(p.delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.release:
	}
	return nil
}

func (p preflight) Kubernetes() kubernetes.Interface { return p.kube }
