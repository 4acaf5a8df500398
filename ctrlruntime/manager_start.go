package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cm "github.com/actorkube/controllermanager"
)

// Start runs the manager until ctx ends or the supervision tree stops by
// itself (an escalation, a lost lease), and returns why: nil when ctx
// ended and everything stopped. In order:
//  1. the metrics server, the health probe server and the webhook server
//     (once GetWebhookServer has been called) start, on every replica (a
//     standby answers its probes, and serves the conversion webhooks the
//     caches need to sync); a failure of one of them stops the manager;
//  2. the supervision tree starts (controllermanager.ControllerManager's
//     Serve): the shared cache and its warm informers, then the runnables
//     that need no election, then the election;
//     once elected, Elected is closed and the controllers run;
//  3. when ctx ends, the tree shuts down (bounded by
//     GracefulShutdownTimeout, default 30s) and gives the Lease up;
//  4. the cache stops, then the servers, each step logged with
//     controller-runtime's line ("Stopping and waiting for caches", ...).
//
// Every step that started is stopped, also when a later one fails. Start
// may be called once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("ctrlruntime: Manager.Start: already started")
	}
	m.started = true
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	// Whatever ends Start, the children kept by an Add after it are
	// dropped and a later Add goes to the tree (which refuses it).
	defer m.endLate()

	// Whatever started the cache (the tree's pre-flight), nothing else
	// stops it.
	stopCache := sync.OnceFunc(func() {
		sctx, cancel := context.WithTimeout(context.Background(), m.boundedShutdown())
		defer cancel()
		m.cctx.Stop(sctx)
	})
	defer stopCache()

	unshare, err := shareMetrics(m.ctrl)
	if err != nil {
		return fmt.Errorf("ctrlruntime: Manager.Start: %w", err)
	}
	defer unshare()

	m.ctrl.Add(pending...)
	unsubscribe := m.ctrl.Subscribe(func(e cm.Event) {
		if m.ctrl.IsStarting() || m.ctrl.IsStarted() {
			m.electedOnce.Do(func() { close(m.elected) })
		}
		// The children added after Start and kept until the tree runs
		// (Add): a PhaseChanged to Running, or events this subscriber
		// missed, wake addLate.
		if e.Type == cm.PhaseChanged && e.Phase == cm.PhaseRunning || e.Type == cm.EventsDropped {
			m.kickLate()
		}
	})
	defer unsubscribe()

	servers, err := m.startServers()
	if err != nil {
		return fmt.Errorf("ctrlruntime: Manager.Start: %w", err)
	}
	// The webhook server starts before the tree's pre-flight syncs the
	// caches, as under controller-runtime (a conversion webhook it serves
	// is what lets a multi-version CRD's informer sync); used first after
	// Start, it starts then (GetWebhookServer).
	m.mu.Lock()
	m.servers = servers
	webhooks := m.webhookUsed
	m.mu.Unlock()
	if webhooks {
		servers.startWebhooks(m)
	}
	stopServers := sync.OnceFunc(servers.stop)
	defer stopServers()

	serveCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-servers.failed:
			cancel(err)
		case <-serveCtx.Done():
		}
	}()
	// controller-runtime's shutdown lines, each logged as the step it
	// names begins. The tree stops the runnables that need no election,
	// those that do and the controllers warming up together, so their
	// three lines come together.
	stopping := make(chan struct{})
	go func() {
		defer close(stopping)
		select {
		case <-serveCtx.Done():
		case <-m.ctrl.Done():
		}
		m.logger.Info("Stopping and waiting for warmup runnables")
		m.logger.Info("Stopping and waiting for non leader election runnables")
		m.logger.Info("Stopping and waiting for leader election runnables")
	}()
	lateDone := make(chan struct{})
	go func() {
		defer close(lateDone)
		m.addLate(serveCtx, cancel)
	}()
	err = m.ctrl.Serve(serveCtx, 0, m.shutdownTimeout)
	if cause := context.Cause(serveCtx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = errors.Join(err, cause) // a server failed, or the tree refused a child Add kept: Serve saw a stop
	}
	cancel(nil)
	<-lateDone
	<-stopping
	m.logger.Info("Stopping and waiting for caches")
	stopCache()
	m.mu.Lock()
	m.servers = nil // a GetWebhookServer from now on starts nothing
	m.mu.Unlock()
	// The webhook server stops with the other servers, as the last
	// HTTP server, after the runnables and the caches.
	m.logger.Info("Stopping and waiting for webhooks")
	m.logger.Info("Stopping and waiting for HTTP servers")
	stopServers()
	m.logger.Info("Wait completed, proceeding to shutdown the manager")
	return err
}

// boundedShutdown is the shutdown timeout, or a minute when unbounded: the
// cache stops in well under that.
func (m *Manager) boundedShutdown() time.Duration {
	if m.shutdownTimeout > 0 {
		return m.shutdownTimeout
	}
	return time.Minute
}

func (m *Manager) uniqueNameLocked(base string) string {
	m.names[base]++
	if n := m.names[base]; n > 1 {
		return fmt.Sprintf("%s-%d", base, n)
	}
	return base
}

// runningServers are the metrics, probe and webhook servers of one Start.
type runningServers struct {
	failed chan error // one server's failure, buffered for every server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startServers starts the metrics server and the probe server; a server
// that fails later sends its error on failed.
func (m *Manager) startServers() (*runningServers, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServers{failed: make(chan error, 3), ctx: ctx, cancel: cancel}
	if addr := m.options.HealthProbeBindAddress; addr != "" && addr != "0" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("HealthProbeBindAddress %q: %w", addr, err)
		}
		// controller-runtime's own server runnable: it logs "starting
		// server" and "shutting down server" with name "health probe" and
		// addr, as under controller-runtime's manager, but on the manager's
		// logger (controller-runtime's go to the global log.Log, which is
		// the manager's logger unless manager.Options.Logger is set).
		probe := &manager.Server{Name: "health probe", Listener: l,
			Server:          &http.Server{Handler: m.probeHandler(), ReadHeaderTimeout: 32 * time.Second},
			ShutdownTimeout: ptr.To(5 * time.Second)}
		s.wg.Go(func() {
			if err := probe.Start(ctrllog.IntoContext(ctx, m.logger)); err != nil {
				s.failed <- fmt.Errorf("health probe server: %w", err)
			}
		})
	}
	if m.metricsServer != nil {
		s.wg.Go(func() {
			if err := m.metricsServer.Start(ctx); err != nil {
				s.failed <- fmt.Errorf("metrics server: %w", err)
			}
		})
	}
	return s, nil
}

// startWebhooks starts the webhook server, once per Start (m.webhookUsed);
// its failure is sent on failed.
func (s *runningServers) startWebhooks(m *Manager) {
	s.wg.Go(func() {
		if err := m.webhookServer.Start(ctrllog.IntoContext(s.ctx, m.logger)); err != nil {
			s.failed <- fmt.Errorf("webhook server: %w", err)
		}
	})
}

func (s *runningServers) stop() {
	s.cancel()
	s.wg.Wait()
}

// ReadyzCachesCheck is the name to give CachesSynced with AddReadyzCheck.
const ReadyzCachesCheck = "caches"

// ReadyzManagerCheck is the name to give PreflightDone with
// AddReadyzCheck.
const ReadyzManagerCheck = "manager"

// PreflightDone is a healthz.Checker that fails until the manager's
// pre-flight (the shared cache's first sync) is done. The probe server
// does not run it unless it is added with AddReadyzCheck, as with
// controller-runtime's manager, whose readiness is only the checks added.
func (m *Manager) PreflightDone(*http.Request) error { return m.ctrl.GetReadiness() }

// CachesSynced is a healthz.Checker that fails, naming each, while a
// running controller's caches have not synced; controllers not running (a
// standby's) pass. Add it with AddReadyzCheck to have it in readiness.
func (m *Manager) CachesSynced(*http.Request) error { return m.cachesSynced() }

// probeHandler serves liveness and readiness as controller-runtime's
// manager does (healthz.Handler at LivenessEndpointName and
// ReadinessEndpointName, with /<check> subpaths and ?verbose), with the
// checks added and no other: a probe answers as under controller-runtime
// from the moment the server listens.
func (m *Manager) probeHandler() http.Handler {
	m.mu.Lock()
	live, ready := maps.Clone(m.healthz), maps.Clone(m.readyz)
	m.mu.Unlock()
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{
		m.options.LivenessEndpointName:  live,
		m.options.ReadinessEndpointName: ready,
	} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, h)
		mux.Handle(path+"/", h)
	}
	return mux
}

// cachesSynced fails naming every running controller whose caches have not
// synced; controllers not running (a standby's) pass.
func (m *Manager) cachesSynced() error {
	m.mu.Lock()
	reporters := append([]syncReporter(nil), m.reporters...)
	m.mu.Unlock()
	var problems []string
	for _, r := range reporters {
		if kinds := r.unsyncedCaches(); len(kinds) > 0 {
			problems = append(problems, fmt.Sprintf("%s: %s", r.Name(), strings.Join(kinds, ", ")))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("caches not synced: %s", strings.Join(problems, "; "))
}
