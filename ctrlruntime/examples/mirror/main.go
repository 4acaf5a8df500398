// Command mirror is a controller-runtime reconciler hosted by
// controllermanager: every ConfigMap labelled mirror.actorkube.io/enabled=true
// is mirrored into "<name>-mirror" beside it, owned by it. Run two of it
// against one cluster: one reconciles, the other waits for the Lease with its
// cache warm, and takes over without a relist when the first dies.
//
//	go run ./examples/mirror -kubeconfig ~/.kube/config -lease-namespace default
//	curl -s localhost:8081/healthz?verbose
//	curl -s localhost:8081/metrics | grep controller_runtime_reconcile_total
//
// Compare with a controller-runtime main.go in docs/migrating.md.
package main

import (
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
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/health"
)

func main() {
	var s settings
	flag.StringVar(&s.addr, "addr", "127.0.0.1:8081", "where to serve /healthz, /readyz and /metrics")
	flag.StringVar(&s.leaseNamespace, "lease-namespace", "default", "namespace of the leader-election Lease")
	flag.StringVar(&s.identity, "identity", "", "this replica's Lease holder identity (default: host name and a UUID)")
	flag.DurationVar(&s.leaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	flag.DurationVar(&s.renewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	flag.DurationVar(&s.retryPeriod, "retry-period", 2*time.Second, "RetryPeriod")
	// -kubeconfig is controller-runtime's flag, read by ctrl.GetConfig.
	flag.Parse()
	s.out = os.Stdout
	// controller-runtime logs through its global logger.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil)))

	config, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mirror:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config, s); err != nil {
		fmt.Fprintln(os.Stderr, "mirror:", err)
		os.Exit(1)
	}
}

type settings struct {
	addr           string
	leaseNamespace string
	identity       string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	out            io.Writer

	// For the tests: every event, every successful reconcile, and the
	// Context once built.
	onEvent      func(cm.Event)
	onReconciled func(types.NamespacedName)
	onContext    func(*ctrlruntime.Context, *cm.ControllerManager)
}

// run serves until ctx ends or the manager stops, then shuts down.
func run(ctx context.Context, config *rest.Config, s settings) error {
	logger := slog.New(slog.NewTextHandler(s.out, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// One registry for the manager's metrics and controller-runtime's.
	registry := prometheus.NewRegistry()
	cctx, err := ctrlruntime.NewContext(config, ctrlruntime.ContextOptions{Registerer: registry})
	if err != nil {
		return err
	}
	mirror, err := ctrlruntime.NewControllerManagedBy(cctx).
		Named("mirror").
		For(&corev1.ConfigMap{}, builder.WithPredicates(sources)).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Build(&MirrorReconciler{Client: cctx.GetClient(), Scheme: cctx.GetScheme(), Reconciled: s.onReconciled})
	if err != nil {
		return err
	}

	opts := []cm.Option{cm.WithRegisterer(registry), cm.WithLogger(logger)}
	if s.identity != "" {
		opts = append(opts, cm.WithIdentity(s.identity))
	}
	m, err := cm.NewControllerManager(cctx, cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled:        ptr.To(true),
			LeaseNamespace: s.leaseNamespace,
			LeaseDuration:  metav1.Duration{Duration: s.leaseDuration},
			RenewDeadline:  metav1.Duration{Duration: s.renewDeadline},
			RetryPeriod:    metav1.Duration{Duration: s.retryPeriod},
		},
	}, "mirror", opts...)
	if err != nil {
		return err
	}
	m.Add(mirror)
	m.Subscribe(func(e cm.Event) {
		logger.Info("event", "event", e.String())
		if s.onEvent != nil {
			s.onEvent(e)
		}
	})
	if s.onContext != nil {
		s.onContext(cctx, m)
	}

	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           health.NewHandler(m, health.WithMetrics(registry)),
		ReadHeaderTimeout: 5 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())

	// Start blocks until this replica holds the Lease; a standby waits here
	// with its cache synced (the pre-flight started it).
	startErr := m.Start(ctx, time.Minute)
	if startErr == nil {
		logger.Info("leading: reconciling")
		select {
		case <-ctx.Done():
		case <-m.Done(): // lost the Lease or escalated
		}
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.ShutdownAndWait(shutdownCtx) // gives the Lease up last
	cctx.Stop(shutdownCtx)
	_ = srv.Shutdown(shutdownCtx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if startErr != nil && !errors.Is(startErr, context.Canceled) {
		return startErr
	}
	return m.Err()
}
