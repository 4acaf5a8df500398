// Command hostloop is the README's example as a program: a service that
// embeds a ControllerManager, serves its probes and metrics, and runs it with
// Serve, the whole host loop (start, wait for SIGTERM or for the manager to
// stop by itself, shut down, the exit status). It exits 0 after SIGTERM, on
// the leader and on a standby alike, and 1 when the manager stopped by
// itself (an escalation, a lost lease) or could not start.
//
//	go run ./examples/hostloop                      # no cluster: no election; Ctrl-C stops it
//	go run ./examples/hostloop -kubeconfig ~/.kube/config
//	                                                # leader election over the Lease "hostloop"
//	                                                # in "default": start a second one on
//	                                                # -addr 127.0.0.1:8082, it waits as a standby
//	curl -s localhost:8081/readyz; curl -s localhost:8081/metrics
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file; with it, leader election is on")
	addr := flag.String("addr", "127.0.0.1:8081", "where to serve /healthz, /readyz and /metrics")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// SIGTERM (a rolling update, kubectl delete) and Ctrl-C end ctx: Serve
	// then shuts the manager down and returns nil.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *kubeconfig, *addr, log); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
	log.Info("stopped cleanly")
}

func run(ctx context.Context, kubeconfig, addr string, log *slog.Logger) error {
	ctrlContext := controllermanager.NewContext(nil)
	var spec controllermanager.ControllerManagerConfigSpec
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := []controllermanager.Option{controllermanager.WithLogger(log), controllermanager.WithRegisterer(registry)}
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		clientset, err := kubernetes.NewForConfig(cfg) // the controllers' client
		if err != nil {
			return err
		}
		// Leader election gets a clientset of its own, and so a rate limiter
		// of its own: the lease's renewals never queue behind the
		// controllers' requests (docs/leader-election.md).
		electionClient, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
		if err != nil {
			return err
		}
		ctrlContext = controllermanager.NewContext(clientset)
		spec.LeaderElection = &controllermanager.LeaderElectionSpec{Enabled: ptr.To(true), LeaseNamespace: "default"}
		opts = append(opts, controllermanager.WithLeaderElectionClient(electionClient))
	}

	mgr, err := controllermanager.NewControllerManager(ctrlContext, spec, "hostloop", opts...)
	if err != nil {
		return err // every invalid field, named
	}
	mgr.Add(&resyncer{every: 5 * time.Second, log: log})
	mgr.Subscribe(func(e controllermanager.Event) { log.Info("supervision", "event", e.String()) })

	mux := http.NewServeMux()
	mux.Handle("/", health.NewHandler(mgr, health.WithMetrics(registry))) // /healthz, /readyz, /metrics
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	log.Info("serving the probes", "addr", ln.Addr().String())

	// Start (a standby waits in it for the lease), wait for ctx or Done,
	// ShutdownAndWait within 30s; nil after SIGTERM, also on a standby.
	return mgr.Serve(ctx, time.Minute, 30*time.Second)
}

// resyncer is a furiko-style controller: Run starts its worker and returns.
// The context passed to Run is cancelled as soon as Run returns, so the
// worker runs on a context of its own, ended by Shutdown; it is derived
// with context.WithoutCancel so that it keeps what the manager put in Run's
// context (controllermanager.FailureReporter) without its cancellation.
type resyncer struct {
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

func (r *resyncer) Name() string { return "resyncer" }

func (r *resyncer) Run(ctx context.Context) error {
	report, _ := controllermanager.FailureReporter(ctx)
	workCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	r.mu.Lock()
	r.stop, r.done = stop, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		tick := time.NewTicker(r.every)
		defer tick.Stop()
		for {
			select {
			case <-workCtx.Done():
				return
			case <-tick.C:
				if err := r.resync(workCtx); err != nil {
					report(err) // the supervisor restarts this controller alone
					<-workCtx.Done()
					return
				}
			}
		}
	}()
	return nil
}

// resync stands for the controller's work: list, compare, write. An error
// it cannot retry is reported, and the supervisor restarts the controller.
func (r *resyncer) resync(context.Context) error {
	r.log.Debug("resync")
	return nil
}

func (r *resyncer) Shutdown(ctx context.Context) {
	r.mu.Lock()
	stop, done := r.stop, r.done
	r.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (r *resyncer) GetHealth() controllermanager.HealthStatus {
	return controllermanager.HealthStatus{Name: "resyncer", Healthy: true}
}
