// Command demo is a small service embedding the runtime: three controllers,
// a store and an admission webhook, each in a supervised actor, with
// /healthz, /readyz, /metrics and the webhook served on a local port, and
// the live view of the supervision tree on a port of its own, on loopback. It
// prints every supervision event as it happens and stops cleanly on Ctrl-C.
//
// One controller, "flaky", fails in its background work every 20 seconds,
// and the supervisor restarts it alone: watch the ChildFailed and
// ChildRestarted events, and /healthz while it restarts.
//
//	go run ./examples/demo                 # serves on 127.0.0.1:8080, the live view on 127.0.0.1:8082
//	curl -s localhost:8080/healthz?verbose
//	curl -s localhost:8080/readyz
//	curl -s localhost:8080/metrics
//	open http://localhost:8082/debug/supervision/   # the live supervision tree
//	go run ./examples/demo -addr :9090 -view-addr 127.0.0.1:9092 -for 30s
//
// Both servers have the timeouts of the library's own webhook server
// (webhook.Server): a client that dribbles its headers or its body, or does
// not read its answer, is cut off. The live view shows error messages and
// panic stacks, and answers only requests whose Host is a loopback name or
// address: keep it on loopback (read it with kubectl port-forward), and
// never on the listener of /validate, which the API server must reach.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/webhook"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "where to serve /healthz, /readyz, /metrics and the webhook")
	viewAddr := flag.String("view-addr", "127.0.0.1:8082", "where to serve the live view of the supervision tree (keep it on loopback)")
	runFor := flag.Duration("for", 0, "stop by itself after this long (0: run until Ctrl-C)")
	failEvery := flag.Duration("fail-every", 20*time.Second, "how often the flaky controller fails")
	replicas := flag.Int("replicas", 0, "run the sharded-leadership demo with this many replicas instead (see replicas.go)")
	shards := flag.Int("shards", 12, "with -replicas: the number of shards")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if *replicas > 0 {
		if err := runReplicas(ctx, replicasConfig{replicas: *replicas, shards: *shards, killAfter: 3 * time.Second}, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, config{addr: *addr, viewAddr: *viewAddr, failEvery: *failEvery}, os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type config struct {
	addr      string // /healthz, /readyz, /livez, /metrics and /validate
	viewAddr  string // the live view
	failEvery time.Duration
	timeouts  timeouts // zero: the library webhook server's
}

// timeouts are an http.Server's bounds on a client.
type timeouts struct {
	readHeader, read, write, idle time.Duration
}

// serverTimeouts are those of the library's own webhook server
// (webhook.ServerConfig's defaults): 10s for the headers, 30s for the whole
// request (the longest timeoutSeconds an API server sends), 35s for the
// answer, 120s for an idle keep-alive connection.
var serverTimeouts = timeouts{
	readHeader: 10 * time.Second,
	read:       webhook.DefaultServerReadTimeout,
	write:      webhook.DefaultServerWriteTimeout,
	idle:       webhook.DefaultServerIdleTimeout,
}

// newServer is an http.Server for handler with the timeouts t and the
// library webhook server's bound on the size of a request's headers.
func newServer(handler http.Handler, t timeouts) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    webhook.DefaultServerMaxHeaderBytes,
	}
}

// addrs are the addresses the demo serves on.
type addrs struct {
	api  string // /healthz, /readyz, /livez, /metrics and /validate
	view string // the live view
}

// run serves until ctx ends, then shuts down. ready, when not nil, receives
// the addresses served once the manager has started (it must have room for
// them: the event subscriber sends them).
func run(ctx context.Context, cfg config, out io.Writer, ready chan<- addrs) error {
	var printMu sync.Mutex
	printf := func(format string, args ...any) {
		printMu.Lock()
		defer printMu.Unlock()
		fmt.Fprintf(out, format, args...)
	}

	if cfg.timeouts == (timeouts{}) {
		cfg.timeouts = serverTimeouts
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	viewLn, err := net.Listen("tcp", cfg.viewAddr)
	if err != nil {
		return fmt.Errorf("the live view: %w", err)
	}
	defer viewLn.Close()
	var announce sync.Once

	// The manager's metrics go on the host's registry, beside the Go
	// runtime's and the process's, all served at /metrics.
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{
			HealthInterval: metav1.Duration{Duration: 2 * time.Second},
		},
	}, "demo",
		cm.WithLogger(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		cm.WithRegisterer(registry))
	if err != nil {
		return err
	}
	m.Subscribe(func(e cm.Event) {
		printf("%s  %s\n", e.Time.Format("15:04:05.000"), e)
		if e.Type == cm.PhaseChanged && e.Phase == cm.PhaseRunning && ready != nil {
			announce.Do(func() { ready <- addrs{api: ln.Addr().String(), view: viewLn.Addr().String()} })
		}
	})

	m.AddStore(&inventory{})
	m.Add(
		newWorker("ticker", time.Second, 0),
		newWorker("flaky", time.Second, cfg.failEvery),
		newWorker("reporter", 5*time.Second, 0),
		&denyPrivileged{},
	)
	// A tenant's store and the worker that reads it, supervised together as
	// one group: RestForOne restarts the worker when its store fails, and a
	// tenant that spends its own budget stops (ExhaustedStop) instead of
	// stopping the manager. Its children are "tenant-a/inventory" and
	// "tenant-a/reconciler" in the events, Status and the metrics.
	m.Add(cm.NewGroup("tenant-a", cm.SupervisionSpec{Strategy: cm.RestForOne, OnExhausted: cm.ExhaustedStop},
		cm.StoreChild(&inventory{}), newWorker("reconciler", time.Second, 0)))

	mux := http.NewServeMux()
	mux.Handle("/", health.NewHandler(m, health.WithMetrics(registry))) // /healthz, /livez, /readyz, /metrics
	mux.Handle("/validate", m.Handler())
	srv := newServer(mux, cfg.timeouts)
	// The live view shows errors and stacks: on a listener of its own, on
	// loopback, never on the one of /validate.
	view := http.NewServeMux()
	view.Handle(liveview.DefaultPrefix+"/", liveview.Handler(m))
	viewSrv := newServer(view, cfg.timeouts)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	go func() { served <- viewSrv.Serve(viewLn) }()
	printf("serving /healthz, /readyz, /metrics and /validate on http://%s; Ctrl-C to stop\n", ln.Addr())
	printf("supervision tree, live: http://%s%s/\n", viewLn.Addr(), liveview.DefaultPrefix)

	// Serve is the host loop: Start, wait for ctx (Ctrl-C, SIGTERM) or for
	// the manager to stop by itself (an escalation), ShutdownAndWait within
	// 10s; nil after a requested stop.
	serveErr := m.Serve(ctx, 30*time.Second, 10*time.Second)

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	_ = viewSrv.Shutdown(shutdownCtx) // an event stream ends when the manager stops, after its "end"
	for range 2 {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	if serveErr != nil {
		return fmt.Errorf("manager failed: %w", serveErr)
	}
	printf("stopped cleanly\n")
	return nil
}

// worker is a furiko-style controller: Run starts a background loop and
// returns; Shutdown stops it and waits. With failEvery > 0 its loop reports
// a failure that often, through the reporter its Run context carries.
type worker struct {
	name      string
	every     time.Duration
	failEvery time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	ticks  atomic.Int64
}

func newWorker(name string, every, failEvery time.Duration) *worker {
	return &worker{name: name, every: every, failEvery: failEvery}
}

func (w *worker) Name() string { return w.name }

func (w *worker) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w.mu.Lock()
	w.cancel, w.done = cancel, done
	w.mu.Unlock()
	go func() {
		defer close(done)
		tick := time.NewTicker(w.every)
		defer tick.Stop()
		var fail <-chan time.Time
		if w.failEvery > 0 {
			t := time.NewTimer(w.failEvery)
			defer t.Stop()
			fail = t.C
		}
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-tick.C:
				w.ticks.Add(1)
			case <-fail:
				report(fmt.Errorf("lost the watch on its objects"))
				<-loopCtx.Done() // a failed loop waits for Shutdown
				return
			}
		}
	}()
	return nil
}

func (w *worker) Shutdown(ctx context.Context) {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (w *worker) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: w.name, Healthy: true, Message: fmt.Sprintf("%d ticks", w.ticks.Load())}
}

// inventory is a store recovered before the controllers run.
type inventory struct{}

func (*inventory) Name() string { return "inventory" }

func (*inventory) Recover(ctx context.Context) error {
	select { // as if listing what was there before the restart
	case <-time.After(200 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// denyPrivileged is a validating webhook that denies objects whose JSON
// asks for "privileged": true.
type denyPrivileged struct{ ready atomic.Bool }

func (*denyPrivileged) Name() string { return "deny-privileged" }
func (*denyPrivileged) Path() string { return "/validate" }

func (d *denyPrivileged) Start(context.Context) error { d.ready.Store(true); return nil }
func (d *denyPrivileged) Ready() bool                 { return d.ready.Load() }
func (d *denyPrivileged) Shutdown(context.Context)    { d.ready.Store(false) }

func (*denyPrivileged) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	if bytes.Contains(bytes.ReplaceAll(req.Object.Raw, []byte(" "), nil), []byte(`"privileged":true`)) {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false,
			Result: &metav1.Status{Message: "privileged containers are not allowed"}}, nil
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, nil
}
