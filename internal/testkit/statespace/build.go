package statespace

import (
	"context"
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
		kube = r.client
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
	return nil
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
