package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cm "github.com/actorkube/controllermanager"
)

// ErrNotRestartable is the error of a second Run of a controller built by
// controller-runtime's own builder (ctrl.NewControllerManagedBy): such a
// controller refuses a second Start, so the supervisor cannot restart it,
// and its failure stops the manager once the restart budget is spent.
var ErrNotRestartable = errors.New("ctrlruntime: a controller-runtime controller cannot be started twice; build it with ctrlruntime.NewControllerManagedBy to have it restarted")

// syncReporter is a hosted controller that can say what keeps its running
// incarnation's caches from being synced, for the Manager's readiness.
type syncReporter interface {
	Name() string
	unsyncedCaches() []string
}

// ctrlController is a controller built by controller-runtime's builder or
// controller.New on a Manager, which adds it with Add.
type ctrlController = controller.Controller

// newOnceController hosts c, started once when elected: its Start runs
// until the manager stops or loses the lease; a second Run (a restart) is
// ErrNotRestartable.
func newOnceController(name string, c ctrlController) *Runnable {
	started := false
	r, _ := NewRunnable(name, func() (manager.Runnable, error) {
		if started {
			return nil, fmt.Errorf("controller %q: %w", name, ErrNotRestartable)
		}
		started = true
		return c, nil
	})
	return r
}

// controllerName is a controller-runtime controller's name (its Name
// field), or "controller" when it has none.
func controllerName(c ctrlController) string {
	v := reflect.ValueOf(c)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		if f := v.FieldByName("Name"); f.IsValid() && f.Kind() == reflect.String && f.String() != "" {
			return strings.ReplaceAll(f.String(), "/", "-")
		}
	}
	return "controller"
}

// everyReplica hosts a controller or runnable whose NeedLeaderElection is
// false as a webhook-kind child: the supervision tree starts webhooks on
// every replica, before the election, and restarts them on failure. It
// serves no admission request (nothing routes to its Path).
type everyReplica struct {
	c    cm.Controller
	name string
}

var _ cm.Webhook = everyReplica{}

// onEveryReplica wraps c, named by its Name method, else by its health's
// name, as the manager names a controller.
func onEveryReplica(c cm.Controller) everyReplica {
	if n, ok := c.(interface{ Name() string }); ok {
		return everyReplica{c: c, name: n.Name()}
	}
	return everyReplica{c: c, name: c.GetHealth().Name}
}

func (e everyReplica) Name() string                    { return e.name }
func (e everyReplica) Start(ctx context.Context) error { return e.c.Run(ctx) }
func (e everyReplica) Ready() bool                     { return e.c.GetHealth().Healthy }
func (e everyReplica) Shutdown(ctx context.Context)    { e.c.Shutdown(ctx) }
func (e everyReplica) Path() string                    { return "/.ctrlruntime/runnable/" + e.name }
func (e everyReplica) Handle(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return nil, fmt.Errorf("ctrlruntime: %q is a runnable, not an admission webhook", e.name)
}

// unsyncedCaches reports the hosted controller's, for readiness.
func (e everyReplica) unsyncedCaches() []string {
	if r, ok := e.c.(syncReporter); ok {
		return r.unsyncedCaches()
	}
	return nil
}

// managerDefaults are what a Manager gives the controllers built on its
// Context: manager.Options.Controller, and the manager's logger.
type managerDefaults struct {
	controller config.Controller
	logger     logr.Logger
}

// withControllerDefaults fills the zero fields of opts from the controller
// defaults of the Manager whose Context built the controller, as
// controller-runtime's controller.NewTyped fills them from
// mgr.GetControllerOptions() (TypedOptions.DefaultFromConfig); nil d (a
// Context of its own) leaves opts as they are. GroupKindConcurrency is the
// builder's (it knows the For kind), as there; SkipNameValidation and
// EnableWarmup are always true here; NeedLeaderElection is the
// controller's own field (see New).
func withControllerDefaults[request comparable](d *managerDefaults, opts TypedOptions[request]) TypedOptions[request] {
	if d == nil {
		return opts
	}
	def := d.controller
	if opts.MaxConcurrentReconciles <= 0 && def.MaxConcurrentReconciles > 0 {
		opts.MaxConcurrentReconciles = def.MaxConcurrentReconciles
	}
	if opts.CacheSyncTimeout == 0 && def.CacheSyncTimeout > 0 {
		opts.CacheSyncTimeout = def.CacheSyncTimeout
	}
	if opts.UsePriorityQueue == nil {
		opts.UsePriorityQueue = def.UsePriorityQueue
	}
	if opts.RecoverPanic == nil {
		opts.RecoverPanic = def.RecoverPanic
	}
	if opts.ReconciliationTimeout == 0 {
		opts.ReconciliationTimeout = def.ReconciliationTimeout
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = def.Logger
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = d.logger
	}
	return opts
}

// needLeaderElection is the manager's Controller.NeedLeaderElection, true
// when unset or without a Manager.
func (d *managerDefaults) needLeaderElection() bool {
	return d == nil || d.controller.NeedLeaderElection == nil || *d.controller.NeedLeaderElection
}
