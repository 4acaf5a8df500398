package controllermanager_test

import (
	"context"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

// This file is the API contract of DESIGN.md, written as code that must
// compile: code outside the project is written against these names and
// signatures, so a change that breaks one breaks the build here first. It
// runs nothing.

type contractController struct{}

func (contractController) Shutdown(context.Context)  {}
func (contractController) Run(context.Context) error { return nil }
func (contractController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "c", Healthy: true, Message: ""}
}

type contractStore struct{}

func (contractStore) Name() string                  { return "s" }
func (contractStore) Recover(context.Context) error { return nil }

type contractWebhook struct{}

func (contractWebhook) Shutdown(context.Context)    {}
func (contractWebhook) Name() string                { return "w" }
func (contractWebhook) Start(context.Context) error { return nil }
func (contractWebhook) Ready() bool                 { return true }
func (contractWebhook) Path() string                { return "/w" }
func (contractWebhook) Handle(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return nil, nil
}

type contractContext struct{}

func (contractContext) Start(context.Context) error      { return nil }
func (contractContext) Kubernetes() kubernetes.Interface { return nil }

var (
	_ cm.Runnable   = contractController{}
	_ cm.Controller = contractController{}
	_ cm.Store      = contractStore{}
	_ cm.Webhook    = contractWebhook{}
	_ cm.Context    = contractContext{}

	_ func(context.Context, []cm.Store) error      = cm.RecoverStores
	_ func(context.Context, []cm.Controller) error = cm.RunControllers
	_ func(context.Context, []cm.Runnable)         = cm.ShutdownRunnables
	_ func(context.Context, []cm.Webhook) error    = cm.StartWebhooksAndWait
	_ func(kubernetes.Interface) cm.Context        = cm.NewContext

	_ health.Source = (*cm.ControllerManager)(nil)
	_ health.Source = (*cm.WebhookManager)(nil)
	_ health.Source = (*cm.BaseManager)(nil)
)

// contractCalls uses every method as the seed's callers do.
func contractCalls(ctx context.Context) {
	enabled := true
	spec := cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &enabled, LeaseName: "l", LeaseNamespace: "ns",
			LeaseDuration: metav1.Duration{Duration: 30 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 15 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 5 * time.Second},
		},
		Supervision: &cm.SupervisionSpec{
			Strategy: cm.OneForOne, MaxRestarts: 5,
			RestartWindow:  metav1.Duration{Duration: time.Minute},
			InitialBackoff: metav1.Duration{Duration: 100 * time.Millisecond},
			MaxBackoff:     metav1.Duration{Duration: 30 * time.Second},
			HealthInterval: metav1.Duration{Duration: 10 * time.Second},
			HealthTimeout:  metav1.Duration{Duration: time.Second}, UnhealthyThreshold: 3,
		},
	}
	var strategies = []cm.SupervisionStrategy{cm.OneForOne, cm.AllForOne, cm.RestForOne}
	_ = strategies

	b := cm.NewBaseManager(contractContext{})
	b.Add(contractController{})
	var health []cm.HealthStatus = b.GetHealth()
	var err error = b.GetReadiness()
	var started, starting bool = b.IsStarted(), b.IsStarting()
	b.ShutdownAndWait(ctx)
	err = b.Start(ctx)

	m, err := cm.NewControllerManager(contractContext{}, spec, "default-lease")
	m.Add(contractController{})
	m.AddStore(contractStore{})
	health = m.GetHealth()
	m.ShutdownAndWait(ctx)
	err = m.Start(ctx, time.Minute)

	w := cm.NewWebhookManager(contractContext{})
	w.Add(contractWebhook{})
	err = w.Start(ctx)
	var h http.Handler = w.Handler()
	h = health2(m)

	var cancel func() = m.Subscribe(func(e cm.Event) {
		var (
			t        cm.EventType = e.Type
			at       time.Time    = e.Time
			child    string       = e.Child
			kind     string       = e.Kind
			phase    cm.Phase     = e.Phase
			restarts int          = e.Restarts
			cause    error        = e.Err
		)
		_, _, _, _, _, _, _ = t, at, child, kind, phase, restarts, cause
	})
	cancel()
	var done <-chan struct{} = m.Done()
	err = m.Err()
	m.Send(supervisor.RestartChild{Name: "c"})
	m.Send(supervisor.StopChild{Name: "c"})
	m.Send(supervisor.StartChild{Name: "c"})
	var reply any
	reply, err = m.Request(ctx, supervisor.GetStatus{})
	var status supervisor.Status
	status, _ = reply.(supervisor.Status)
	var pid *actor.PID = m.PID()

	for _, t := range []cm.EventType{cm.PhaseChanged, cm.ChildStarted, cm.ChildFailed, cm.ChildRestarted,
		cm.ChildStopped, cm.ChildUnhealthy, cm.Escalated, cm.LeaderElected, cm.LeaderLost} {
		_ = t
	}
	for _, p := range []cm.Phase{cm.PhaseIdle, cm.PhaseInitializing, cm.PhaseElecting, cm.PhaseRecovering,
		cm.PhaseStarting, cm.PhaseRunning, cm.PhaseShuttingDown, cm.PhaseStopped, cm.PhaseFailed} {
		_ = p
	}
	_, _, _, _, _, _, _, _ = health, err, started, starting, h, done, status, pid
}

func health2(src health.Source) http.Handler { return health.NewHandler(src) }

var _ = contractCalls
