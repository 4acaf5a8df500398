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

	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cm "github.com/actorkube/controllermanager"
)

// Start runs the manager until ctx ends or the supervision tree stops by
// itself (an escalation, a lost lease), and returns why: nil when ctx
// ended and everything stopped. In order:
//  1. the metrics server and the health probe server start, on every
//     replica (a standby answers its probes);
//  2. the supervision tree starts (controllermanager.ControllerManager's
//     Serve): the shared cache and its warm informers, then the webhook
//     server and the runnables that need no election, then the election;
//     once elected, Elected is closed and the controllers run;
//  3. when ctx ends, the tree shuts down (bounded by
//     GracefulShutdownTimeout, default 30s) and gives the Lease up;
//  4. the servers stop, then the cache and the event recorders.
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
	if m.webhookUsed {
		hosted, _ := NewRunnable(m.uniqueNameLocked("webhook-server"), func() (manager.Runnable, error) { return m.webhookServer, nil })
		pending = append([]cm.Runnable{onEveryReplica(hosted)}, pending...)
	}
	m.mu.Unlock()

	// The cache is stopped last: whatever started it (the tree's
	// pre-flight), nothing else stops it.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), m.boundedShutdown())
		defer cancel()
		m.cctx.Stop(sctx)
	}()

	unshare, err := shareMetrics(m.ctrl)
	if err != nil {
		return fmt.Errorf("ctrlruntime: Manager.Start: %w", err)
	}
	defer unshare()

	m.ctrl.Add(pending...)
	unsubscribe := m.ctrl.Subscribe(func(cm.Event) {
		if m.ctrl.IsStarting() || m.ctrl.IsStarted() {
			m.electedOnce.Do(func() { close(m.elected) })
		}
	})
	defer unsubscribe()

	servers, err := m.startServers()
	if err != nil {
		return fmt.Errorf("ctrlruntime: Manager.Start: %w", err)
	}
	defer servers.stop()

	serveCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-servers.failed:
			cancel(err)
		case <-serveCtx.Done():
		}
	}()
	err = m.ctrl.Serve(serveCtx, 0, m.shutdownTimeout)
	if cause := context.Cause(serveCtx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = errors.Join(err, cause) // a server failed: Serve saw a stop
	}
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

// runningServers are the metrics and probe servers of one Start.
type runningServers struct {
	failed chan error // one server's failure, buffered for every server
	cancel context.CancelFunc
	probe  *http.Server
	wg     sync.WaitGroup
}

// startServers starts the metrics server and the probe server; a server
// that fails later sends its error on failed.
func (m *Manager) startServers() (*runningServers, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServers{failed: make(chan error, 2), cancel: cancel}
	if addr := m.options.HealthProbeBindAddress; addr != "" && addr != "0" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("HealthProbeBindAddress %q: %w", addr, err)
		}
		s.probe = &http.Server{Handler: m.probeHandler(), ReadHeaderTimeout: 32 * time.Second}
		s.wg.Go(func() {
			if err := s.probe.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
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

func (s *runningServers) stop() {
	s.cancel()
	if s.probe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.probe.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
}

// ReadyzCachesCheck names the readiness check that fails while a running
// controller's caches have not synced.
const ReadyzCachesCheck = "caches"

// ReadyzManagerCheck names the readiness check that fails until the
// manager's pre-flight (the shared cache's first sync) is done.
const ReadyzManagerCheck = "manager"

// probeHandler serves liveness and readiness as controller-runtime's
// manager does (healthz.Handler at LivenessEndpointName and
// ReadinessEndpointName, with /<check> subpaths and ?verbose). Liveness
// runs the host's checks only: a controller whose caches sync, or which is
// unhealthy, is the supervisor's to restart, not a reason to kill the
// process. Readiness runs the host's checks, "manager" and "caches".
func (m *Manager) probeHandler() http.Handler {
	m.mu.Lock()
	live, ready := maps.Clone(m.healthz), maps.Clone(m.readyz)
	m.mu.Unlock()
	if _, taken := ready[ReadyzManagerCheck]; !taken {
		ready[ReadyzManagerCheck] = func(*http.Request) error { return m.ctrl.GetReadiness() }
	}
	if _, taken := ready[ReadyzCachesCheck]; !taken {
		ready[ReadyzCachesCheck] = func(*http.Request) error { return m.cachesSynced() }
	}
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
