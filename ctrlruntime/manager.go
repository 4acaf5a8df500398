package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	cm "github.com/actorkube/controllermanager"
)

// The defaults NewManager takes from controller-runtime's manager where
// manager.Options leaves a field nil, so that a scaffold behaves as it does
// under controller-runtime.
const (
	DefaultManagerLeaseDuration           = 15 * time.Second
	DefaultManagerRenewDeadline           = 10 * time.Second
	DefaultManagerRetryPeriod             = 2 * time.Second
	DefaultManagerGracefulShutdownTimeout = 30 * time.Second
)

// Manager is a controller-runtime manager.Manager whose controllers and
// runnables are children of a controllermanager.ControllerManager: a
// kubebuilder project moves over by replacing ctrl.NewManager with
// NewManager, and the builder line of each SetupWithManager with
// NewControllerManagedBy.
//
// What it runs, and where:
//   - on every replica, from Start until Start returns: the shared cache
//     (started before the election, so a standby is warm), the metrics
//     server, the health probe server, the webhook server (once
//     GetWebhookServer has been called; as the other two servers, not a
//     supervised child: its failure stops the manager) and every runnable
//     or controller whose NeedLeaderElection is false, the last two as
//     supervised children restarted on failure;
//   - only while elected, fenced: controllers built with
//     NewControllerManagedBy (each restarted alone on failure, RestartChild
//     rebuilds it), controllers built with controller-runtime's own builder
//     (started once: a controller-runtime controller cannot be started
//     twice, so a failure of one stops the manager once the restart budget
//     is spent), and every other runnable.
//
// ControllerManager returns the supervision tree, for Status, RestartChild,
// Subscribe and the live view.
type Manager struct {
	// hostCluster is the cluster, embedded for one method: its
	// GetEventRecorder (events.k8s.io/v1 Events reported by name, sent
	// until Start returns), whose result type changed in controller-runtime
	// v0.25 (recorder.EventRecorder, before it client-go's
	// events.EventRecorder). Promoted, it has the signature manager.Manager
	// wants in the version the build selects.
	hostCluster
	config          *rest.Config
	options         manager.Options
	logger          logr.Logger
	cluster         cluster.Cluster
	cctx            *Context
	ctrl            *cm.ControllerManager
	metricsServer   metricsserver.Server // nil: Metrics.BindAddress "0"
	webhookServer   webhook.Server
	converters      conversion.Registry
	shutdownTimeout time.Duration

	mu          sync.Mutex
	started     bool
	webhookUsed bool
	healthz     map[string]healthz.Checker
	readyz      map[string]healthz.Checker
	pending     []cm.Runnable   // added before Start
	names       map[string]int  // child names in use, for unique runnable names
	added       map[string]bool // the names of the children added before Start
	reporters   []syncReporter  // hosted controllers, for readiness
	late        []cm.Runnable   // added after Start, before the tree ran: see addChild
	lateKick    chan struct{}   // wakes addLate (buffer 1)
	lateEnded   bool            // addLate has ended: Add goes to the tree only
	elected     chan struct{}
	electedOnce sync.Once
	servers     *runningServers // the servers of Start, once started
}

var _ manager.Manager = (*Manager)(nil)

// hostCluster names the embedded cluster.Cluster of a Manager without
// exporting it.
type hostCluster = cluster.Cluster

// NewManager builds a Manager from the options of controller-runtime's
// manager.New, plus options of the ControllerManager under it. Every field
// of options that a kubebuilder scaffold sets means what controller-runtime
// documents, with these differences:
//   - LeaderElectionReleaseOnCancel is always true: a replica that stops
//     fences (stops its controllers) and then gives the Lease up;
//   - LeaseDuration must be whole seconds (a Lease holds seconds);
//   - GracefulShutdownTimeout 0 means no bound, as negative does: the
//     Lease is released only once the controllers have stopped, so the
//     manager cannot return without waiting for them;
//   - LeaderElectionNamespace, when empty, is $POD_NAMESPACE, else the
//     service account's namespace, else "default";
//   - Controller.RecoverPanic false does not end the process at a
//     reconcile's panic: it fails the reconciler, which the supervisor
//     restarts alone (see Options.RecoverPanic); nil and true are
//     controller-runtime's (recovered, counted, logged, retried with
//     backoff);
//   - Controller.EnableWarmup is ignored: caches are always warm before
//     the election.
//
// Fields it cannot honour are refused, each named in the error:
// LeaderElectionResourceLock other than "leases", LeaderElectionLabels,
// PprofBindAddress and BaseContext. Controller.NeedLeaderElection false
// runs every controller on every replica, as with controller-runtime.
// opts are the ControllerManager's (WithRegisterer, WithIdentity,
// WithLogger...); the manager logs through options.Logger unless opts say
// otherwise.
func NewManager(config *rest.Config, options manager.Options, opts ...cm.Option) (*Manager, error) {
	return newManager(config, options, nil, opts)
}

// NewManagerWithSupervision is NewManager with the supervision tree's
// strategy, restart budget, backoff and health probing (what
// manager.Options has no field for); every zero field of supervision takes
// its default, as in ControllerManagerConfigSpec.
func NewManagerWithSupervision(config *rest.Config, options manager.Options, supervision cm.SupervisionSpec, opts ...cm.Option) (*Manager, error) {
	return newManager(config, options, &supervision, opts)
}

func newManager(config *rest.Config, options manager.Options, supervision *cm.SupervisionSpec, opts []cm.Option) (*Manager, error) {
	if config == nil {
		return nil, errors.New("ctrlruntime: NewManager: config is nil")
	}
	if err := refuse(options); err != nil {
		return nil, fmt.Errorf("ctrlruntime: NewManager: %w", err)
	}
	if options.Logger.GetSink() == nil {
		options.Logger = ctrllog.Log
	}
	cl, err := cluster.New(config, func(o *cluster.Options) {
		o.Scheme = options.Scheme
		o.MapperProvider = options.MapperProvider
		o.Logger = options.Logger
		o.Cache = options.Cache
		o.NewCache = options.NewCache
		o.Client = options.Client
		o.NewClient = options.NewClient
		o.EventBroadcaster = options.EventBroadcaster
	})
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: NewManager: cluster: %w", err)
	}
	clientset, err := kubernetes.NewForConfigAndClient(config, cl.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: NewManager: clientset: %w", err)
	}
	cmOpts := []cm.Option{cm.WithLogr(options.Logger)}
	if options.LeaderElectionConfig != nil {
		leClient, err := kubernetes.NewForConfig(options.LeaderElectionConfig)
		if err != nil {
			return nil, fmt.Errorf("ctrlruntime: NewManager: LeaderElectionConfig: %w", err)
		}
		cmOpts = append(cmOpts, cm.WithLeaderElectionClient(leClient))
	}
	if options.LeaderElectionResourceLockInterface != nil {
		cmOpts = append(cmOpts, cm.WithLeaseLock(options.LeaderElectionResourceLockInterface))
	}
	cmOpts = append(cmOpts, opts...)

	// controller-runtime's leader_election_master_status is set by
	// client-go's elector, which never runs here: the manager's own gauge,
	// set by the fenced election, takes its name.
	dropElectionGauge()
	cctx := newContextForCluster(config, cl, clientset, &managerDefaults{controller: options.Controller, logger: options.Logger})
	spec := managerSpec(options)
	spec.Supervision = supervision
	ctrl, err := cm.NewControllerManager(cctx, spec, options.LeaderElectionID, cmOpts...)
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: NewManager: %w", err)
	}

	var metricsSrv metricsserver.Server
	if options.Metrics.BindAddress != "0" {
		metricsSrv, err = metricsserver.NewServer(options.Metrics, config, cl.GetHTTPClient())
		if err != nil {
			return nil, fmt.Errorf("ctrlruntime: NewManager: Metrics: %w", err)
		}
	}
	webhookSrv := options.WebhookServer
	if webhookSrv == nil {
		webhookSrv = webhook.NewServer(webhook.Options{})
	}
	shutdown := DefaultManagerGracefulShutdownTimeout
	if options.GracefulShutdownTimeout != nil {
		// 0 and negative: no bound. controller-runtime's 0 (return without
		// waiting) would release the Lease before the controllers stopped:
		// fencing waits for them.
		shutdown = max(*options.GracefulShutdownTimeout, 0)
	}
	if options.ReadinessEndpointName == "" {
		options.ReadinessEndpointName = "/readyz"
	}
	if options.LivenessEndpointName == "" {
		options.LivenessEndpointName = "/healthz"
	}
	return &Manager{
		hostCluster: cl, config: config, options: options, logger: options.Logger, cluster: cl, cctx: cctx, ctrl: ctrl,
		metricsServer: metricsSrv, webhookServer: webhookSrv, converters: conversion.NewRegistry(),
		shutdownTimeout: shutdown,
		healthz:         map[string]healthz.Checker{}, readyz: map[string]healthz.Checker{},
		names: map[string]int{}, elected: make(chan struct{}), lateKick: make(chan struct{}, 1),
	}, nil
}

// refuse names every field of options that NewManager cannot honour.
func refuse(o manager.Options) error {
	var errs []error
	if o.LeaderElectionResourceLock != "" && o.LeaderElectionResourceLock != "leases" {
		errs = append(errs, fmt.Errorf("LeaderElectionResourceLock %q is not supported: the election uses a coordination.k8s.io Lease (\"leases\")", o.LeaderElectionResourceLock))
	}
	if len(o.LeaderElectionLabels) > 0 {
		errs = append(errs, errors.New("LeaderElectionLabels is not supported: the Lease is created without labels"))
	}
	if o.LeaderElection && o.LeaderElectionID == "" && o.LeaderElectionResourceLockInterface == nil {
		errs = append(errs, errors.New("LeaderElectionID must be set when LeaderElection is true"))
	}
	if o.PprofBindAddress != "" && o.PprofBindAddress != "0" {
		errs = append(errs, errors.New("PprofBindAddress is not supported: serve net/http/pprof with AddMetricsServerExtraHandler, or the health package's WithPprof"))
	}
	if o.BaseContext != nil {
		errs = append(errs, errors.New("BaseContext is not supported: runnables get contexts of their supervisor, ended when they are stopped"))
	}
	return errors.Join(errs...)
}

// managerSpec is the ControllerManager's configuration from options: the
// election, with controller-runtime's timings where options leave them nil.
func managerSpec(o manager.Options) cm.ControllerManagerConfigSpec {
	if !o.LeaderElection {
		return cm.ControllerManagerConfigSpec{}
	}
	orDefault := func(d *time.Duration, def time.Duration) metav1.Duration {
		if d == nil {
			return metav1.Duration{Duration: def}
		}
		return metav1.Duration{Duration: *d}
	}
	return cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
		Enabled:        ptr.To(true),
		LeaseName:      o.LeaderElectionID,
		LeaseNamespace: o.LeaderElectionNamespace,
		LeaseDuration:  orDefault(o.LeaseDuration, DefaultManagerLeaseDuration),
		RenewDeadline:  orDefault(o.RenewDeadline, DefaultManagerRenewDeadline),
		RetryPeriod:    orDefault(o.RetryPeriod, DefaultManagerRetryPeriod),
	}}
}

// ControllerManager is the supervision tree under the Manager: Status,
// RestartChild (through Request), Subscribe, GetHealth.
func (m *Manager) ControllerManager() *cm.ControllerManager { return m.ctrl }

// Context is the shared cache, client and scheme, for code that builds
// reconcilers with New or NewRunnable and adds them with Add.
func (m *Manager) Context() *Context { return m.cctx }

// GetHTTPClient is the HTTP client of the cache, the client and the Lease.
func (m *Manager) GetHTTPClient() *http.Client { return m.cluster.GetHTTPClient() }

// GetConfig is the rest.Config the manager was built from.
func (m *Manager) GetConfig() *rest.Config { return m.config }

// GetCache is the shared cache, started by Start before the election.
func (m *Manager) GetCache() cache.Cache { return m.cctx.GetCache() }

// GetScheme is the scheme of options.Scheme (default: client-go's).
func (m *Manager) GetScheme() *runtime.Scheme { return m.cluster.GetScheme() }

// GetClient reads from the cache and writes to the API server.
func (m *Manager) GetClient() client.Client { return m.cluster.GetClient() }

// GetFieldIndexer indexes the shared cache: call it before Start, as with
// controller-runtime, so that the index is there before the informer
// starts.
func (m *Manager) GetFieldIndexer() client.FieldIndexer { return m.cluster.GetFieldIndexer() }

// GetRESTMapper is the REST mapper of the cache and the client.
func (m *Manager) GetRESTMapper() meta.RESTMapper { return m.cluster.GetRESTMapper() }

// GetAPIReader reads from the API server, bypassing the cache.
func (m *Manager) GetAPIReader() client.Reader { return m.cluster.GetAPIReader() }

// GetEventRecorderFor returns a recorder of core/v1 Events reported by
// name; events are sent until Start returns.
//
// Deprecated: as controller-runtime's, use GetEventRecorder.
func (m *Manager) GetEventRecorderFor(name string) record.EventRecorder {
	return m.cluster.GetEventRecorderFor(name) //nolint:staticcheck // the interface requires it
}

// GetLogger is options.Logger (default: controller-runtime's log.Log).
func (m *Manager) GetLogger() logr.Logger { return m.logger }

// GetControllerOptions is options.Controller: the defaults of every
// controller built on this manager.
func (m *Manager) GetControllerOptions() config.Controller { return m.options.Controller }

// GetConverterRegistry holds the conversion webhooks' converters.
func (m *Manager) GetConverterRegistry() conversion.Registry { return m.converters }

// GetWebhookServer is options.WebhookServer (default: webhook.NewServer
// with its defaults). Once called, the server runs on every replica, as
// under controller-runtime: from Start, before the caches sync (a
// conversion webhook it serves may be what lets them sync), or at once
// when first called after Start. It is not a supervised child: as the
// metrics and probe servers, its failure stops the manager.
func (m *Manager) GetWebhookServer() webhook.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.webhookUsed && m.servers != nil {
		// Under m.mu: Start stops the servers only after clearing
		// m.servers under it.
		m.servers.startWebhooks(m)
	}
	m.webhookUsed = true
	return m.webhookServer
}

// Elected is closed once this replica is elected (at once after Start's
// pre-flight when election is off): its controllers are about to run.
func (m *Manager) Elected() <-chan struct{} { return m.elected }

// AddHealthzCheck adds a liveness check, served at
// options.LivenessEndpointName; it fails after Start.
func (m *Manager) AddHealthzCheck(name string, check healthz.Checker) error {
	return m.addCheck(m.healthz, "AddHealthzCheck", name, check)
}

// AddReadyzCheck adds a readiness check, served at
// options.ReadinessEndpointName; it fails after Start.
func (m *Manager) AddReadyzCheck(name string, check healthz.Checker) error {
	return m.addCheck(m.readyz, "AddReadyzCheck", name, check)
}

func (m *Manager) addCheck(checks map[string]healthz.Checker, op, name string, check healthz.Checker) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.started:
		return fmt.Errorf("ctrlruntime: %s %q: the manager has started", op, name)
	case check == nil:
		return fmt.Errorf("ctrlruntime: %s %q: check is nil", op, name)
	case name == "":
		return fmt.Errorf("ctrlruntime: %s: name is empty", op)
	}
	if _, dup := checks[name]; dup {
		return fmt.Errorf("ctrlruntime: %s %q: a check of that name exists", op, name)
	}
	checks[name] = check
	return nil
}

// AddMetricsServerExtraHandler serves handler at path on the metrics
// server, before Start; with the metrics server off it is ignored, as with
// controller-runtime.
func (m *Manager) AddMetricsServerExtraHandler(path string, handler http.Handler) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if started {
		return fmt.Errorf("ctrlruntime: AddMetricsServerExtraHandler %q: the manager has started", path)
	}
	if m.metricsServer == nil {
		m.logger.Info("warn: metrics server is currently disabled, registering extra handler will be ignored", "path", path)
		return nil
	}
	if err := m.metricsServer.AddExtraHandler(path, handler); err != nil {
		return fmt.Errorf("ctrlruntime: AddMetricsServerExtraHandler %q: %w", path, err)
	}
	return nil
}

// Add adds a runnable, as a child of the supervision tree. Where it runs
// is decided first, as controller-runtime decides it: whatever its kind, a
// runnable whose NeedLeaderElection is false runs on every replica, from
// the pre-flight, standby included; any other only while elected, fenced.
// What it is decides how it is restarted:
//   - a *Controller or *TypedController from NewControllerManagedBy or New,
//     a *Runnable, or any controllermanager.Controller: as it is;
//   - a controller-runtime controller (controller.New, or wrapped as
//     cert-controller wraps its rotator's): started once, health-checked,
//     never restarted (see Manager);
//   - any other manager.Runnable: restarted on failure by calling its
//     Start again.
//
// Added after Start, it is added to the running tree at once, and Add
// returns once it has started. Added after Start while the tree does not
// run yet (its pre-flight, a standby waiting for the Lease, the leader
// still starting its controllers just after Elected is closed), Add does
// not fail: it returns nil and the runnable is kept, then added once the
// tree runs, after those kept before it, in the order added (JobSet and
// Kueue set up their controllers after Start, once cert-controller's
// certificates are ready, and exit on an error). A difference from
// controller-runtime: a runnable added after Start on a standby runs only
// once this replica is elected, even if its NeedLeaderElection is false
// (controller-runtime starts it at once); add such runnables before Start
// to have them run on a standby. A kept runnable that the tree then
// refuses (its name taken, its start failing) stops the manager: Start
// returns that error, which Add could not. Kept runnables that have not
// run when the manager stops are dropped, never started; after Start has
// returned, Add fails.
func (m *Manager) Add(r manager.Runnable) error {
	child, err := m.childFor(r)
	if err != nil {
		return err
	}
	return m.addChild(child)
}

func (m *Manager) childFor(r manager.Runnable) (cm.Runnable, error) {
	if r == nil || reflect.ValueOf(r).Kind() == reflect.Pointer && reflect.ValueOf(r).IsNil() {
		return nil, errors.New("ctrlruntime: Add: runnable is nil")
	}
	// Where it runs is decided first, as controller-runtime's runnable
	// groups do: a runnable that needs no election runs on every replica,
	// whatever it is (cert-controller's rotator adds its reconciler as a
	// controller whose NeedLeaderElection is false).
	le, ok := r.(manager.LeaderElectionRunnable)
	everywhere := ok && !le.NeedLeaderElection()
	if e, ok := r.(endingSetter); ok && !everywhere {
		// Its Shutdown at the manager's shutdown does not return while a
		// reconcile runs (TypedController.Shutdown).
		e.setEnding(m.ending)
	}
	var child cm.Controller
	switch c := r.(type) {
	case cm.Controller:
		child = c
	case ctrlController:
		child = newOnceController(m.uniqueName(controllerName(c)), c)
	default:
		hosted, err := NewRunnable(m.uniqueName("runnable"), func() (manager.Runnable, error) { return r, nil })
		if err != nil {
			return nil, err
		}
		child = hosted
	}
	if everywhere {
		return onEveryReplica(child), nil
	}
	return child, nil
}

// endingSetter is a hosted controller that asks, as it shuts down, whether
// the manager is shutting down (TypedController.Shutdown).
type endingSetter interface{ setEnding(func() bool) }

// ending reports whether the manager is shutting down (or has stopped):
// its readiness is withdrawn before any child's Shutdown is called, and is
// not withdrawn again once given while the manager runs. A controller that
// needs the election runs only after the pre-flight has made it ready.
func (m *Manager) ending() bool { return m.ctrl.GetReadiness() != nil }

// uniqueName is base, or base-2, base-3... when taken.
func (m *Manager) uniqueName(base string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names[base]++
	if n := m.names[base]; n > 1 {
		return fmt.Sprintf("%s-%d", base, n)
	}
	return base
}

// addChild adds child to the tree: before Start, with the others; after,
// at once, or, while the tree refuses children for its phase (not Running
// yet), once it runs, after those kept before it (see Add). The child's
// name (before Running) and readiness reporter are recorded once, when it
// is accepted, and forgotten when it is not added after all.
func (m *Manager) addChild(child cm.Runnable) error {
	m.mu.Lock()
	if !m.started {
		err := m.recordLocked(child)
		if err == nil {
			m.pending = append(m.pending, child)
		}
		m.mu.Unlock()
		return err
	}
	if len(m.late) > 0 && !m.lateEnded {
		// Behind the children kept before it, in the order added.
		err := m.keepLateLocked(child)
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultCacheSyncTimeout)
	defer cancel()
	err := m.ctrl.AddChild(ctx, child)
	if err == nil {
		m.mu.Lock()
		m.addReporterLocked(child)
		m.mu.Unlock()
		return nil
	}
	if !m.notRunningYet(ctx, err) {
		return fmt.Errorf("ctrlruntime: Add: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lateEnded {
		return fmt.Errorf("ctrlruntime: Add: %w", err)
	}
	return m.keepLateLocked(child)
}

// childName is the name child gives itself, if any.
func childName(child cm.Runnable) (string, bool) {
	if n, ok := child.(interface{ Name() string }); ok {
		return n.Name(), true
	}
	return "", false
}

// recordLocked refuses a child whose name one added before Running has,
// as controller-runtime refuses a second controller of a name (the same
// builder completed twice, two reconcilers of one kind without Named),
// rather than have a Start, or the tree once running, fail on two children
// of one name; else it records the name and the readiness reporter. Once
// the tree runs, the tree refuses a name itself.
func (m *Manager) recordLocked(child cm.Runnable) error {
	if name, ok := childName(child); ok {
		if m.added[name] {
			return fmt.Errorf("ctrlruntime: Add: controller with name %s already exists. Controller names must be unique: name one with Named", name)
		}
		if m.added == nil {
			m.added = map[string]bool{}
		}
		m.added[name] = true
	}
	m.addReporterLocked(child)
	return nil
}

// forgetLocked undoes recordLocked, for a child not added after all.
func (m *Manager) forgetLocked(child cm.Runnable) {
	if name, ok := childName(child); ok {
		delete(m.added, name)
	}
	if r, ok := child.(syncReporter); ok {
		m.reporters = slices.DeleteFunc(m.reporters, func(x syncReporter) bool { return x == r })
	}
}

func (m *Manager) addReporterLocked(child cm.Runnable) {
	if r, ok := child.(syncReporter); ok {
		m.reporters = append(m.reporters, r)
	}
}

// keepLateLocked keeps child, added after Start, for the tree once it
// runs: Start's addLate adds it.
func (m *Manager) keepLateLocked(child cm.Runnable) error {
	if err := m.recordLocked(child); err != nil {
		return err
	}
	m.late = append(m.late, child)
	m.kickLate()
	return nil
}

// kickLate wakes addLate: a child was kept, or the tree entered Running.
func (m *Manager) kickLate() {
	select {
	case m.lateKick <- struct{}{}:
	default:
	}
}

// notRunningYet reports whether err, the tree's refusal of an AddChild, is
// for its phase only: not Running yet (Idle, Initializing, Electing,
// Recovering, Starting), or Running by now. A manager shutting down or
// stopped refuses for good.
func (m *Manager) notRunningYet(ctx context.Context, err error) bool {
	if !errors.Is(err, cm.ErrNotRunning) {
		return false
	}
	st, serr := m.ctrl.Status(ctx)
	if serr != nil {
		return false
	}
	switch st.Phase {
	case cm.PhaseIdle, cm.PhaseInitializing, cm.PhaseElecting, cm.PhaseRecovering, cm.PhaseStarting, cm.PhaseRunning:
		return true
	}
	return false
}

// addLate adds the children kept by Add after Start, in order, whenever
// the tree runs (kicked by a PhaseChanged to Running and by each child
// kept), until ctx ends or the tree stops; a child the tree refuses for
// another reason than its phase stops the manager with stop, as the error
// Add could not return. It then ends the keeping (endLate).
func (m *Manager) addLate(ctx context.Context, stop context.CancelCauseFunc) {
	defer m.endLate()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.ctrl.Done():
			return
		case <-m.lateKick:
		}
		for {
			m.mu.Lock()
			if len(m.late) == 0 {
				m.mu.Unlock()
				break
			}
			// Kept at the head until added: an Add meanwhile is kept
			// behind it, not added before it.
			child := m.late[0]
			m.mu.Unlock()
			actx, cancel := context.WithTimeout(ctx, DefaultCacheSyncTimeout)
			err := m.ctrl.AddChild(actx, child)
			wait := err != nil && m.notRunningYet(actx, err)
			cancel()
			if wait {
				break // until the tree enters Running
			}
			m.mu.Lock()
			m.late = m.late[1:]
			if err != nil {
				m.forgetLocked(child)
			}
			m.mu.Unlock()
			if err != nil {
				if ctx.Err() == nil {
					name, _ := childName(child)
					stop(fmt.Errorf("ctrlruntime: Add after Start of %q: %w", name, err))
				}
				return
			}
		}
	}
}

// endLate ends the keeping of children added after Start: from now on Add
// goes to the tree, which refuses it; the children kept and not added are
// dropped (never started, nothing to stop).
func (m *Manager) endLate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lateEnded = true
	for _, child := range m.late {
		m.forgetLocked(child)
		name, _ := childName(child)
		m.logger.Info("a runnable added after Start was not started: the manager stopped before it ran", "name", name)
	}
	m.late = nil
}
