// Command replica is what the end-to-end scenarios run as each replica of a service: it
// embeds the runtime as a real controller manager would, with leader election over a
// real Lease, a few controllers and, optionally, a validating webhook served over TLS,
// and it journals what it does (package journal) so that a test can check, from outside
// the process, that no two replicas' controllers were ever active at once.
//
//	replica --kubeconfig=... --lease-namespace=ns --lease-name=controllers --identity=a \
//	  --lease-duration=4s --renew-deadline=2s --retry-period=500ms --on-lease-lost=Reelect \
//	  --journal=/tmp/a.jsonl [--webhook-addr=127.0.0.1:0 --webhook-cert=... --webhook-key=...] \
//	  [--writer-configmap=fenced --writer-guard=true --writer-every=20ms] [--shards=12] \
//	  [--elector=client-go] [--groups=tenant-a,tenant-b --crash-store=tenant-b --stop-group=tenant-a]
//	  [--metrics-addr=127.0.0.1:0]
//
// With --elector=client-go the replica is one of the previous release: client-go's
// LeaderElector on a LeaseLock, run directly (previous.go), for the mixed-version
// scenario of a rolling upgrade.
//
// With --shards=S > 1 the Lease is split into S shard Leases and the replica runs
// the controllers of sharded.go instead of its three: 3·S of them, spread over the
// shards, each journalled alike.
//
// With --groups the replica runs one supervision tree's group per tenant instead of
// its three controllers (groups.go): "<tenant>/store" and "<tenant>/reconciler",
// RestForOne, ExhaustedStop. --crash-store makes one tenant's store crash-loop, so
// that its group spends its budget and stops; --stop-group stops one group by request
// (StopChild) once it runs. Every group's state in Status is journalled.
//
// With --metrics-addr the manager's metrics are served over plain HTTP at /metrics.
//
// It runs the manager with Serve, as a host should, and exits 0 after SIGTERM or SIGINT
// (once ShutdownAndWait has returned, so the lease has been released), a standby's
// included, and 1 when the manager stopped by itself (a lost lease with
// --on-lease-lost=Exit, an escalation) or could not start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
	"github.com/actorkube/controllermanager/health"
)

type config struct {
	kubeconfig     string
	leaseName      string
	leaseNamespace string
	identity       string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	onLeaseLost    string
	journalPath    string
	webhookAddr    string
	webhookCert    string
	webhookKey     string
	startTimeout   time.Duration
	stopTimeout    time.Duration
	observeEvery   time.Duration
	writerCM       string
	writerGuard    bool
	writerEvery    time.Duration
	shards         int
	elector        string
	groups         string
	crashStore     string
	stopGroup      string
	metricsAddr    string
	fleetLabel     string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; default $KUBECONFIG")
	flag.StringVar(&cfg.leaseName, "lease-name", "replica", "the Lease's name")
	flag.StringVar(&cfg.leaseNamespace, "lease-namespace", "default", "the Lease's namespace; the informer controller watches ConfigMaps there")
	flag.StringVar(&cfg.identity, "identity", "", "lease holder identity; default: the library's (host name and a UUID)")
	flag.DurationVar(&cfg.leaseDuration, "lease-duration", 4*time.Second, "leaderElection.leaseDuration (whole seconds)")
	flag.DurationVar(&cfg.renewDeadline, "renew-deadline", 2*time.Second, "leaderElection.renewDeadline")
	flag.DurationVar(&cfg.retryPeriod, "retry-period", 500*time.Millisecond, "leaderElection.retryPeriod")
	flag.StringVar(&cfg.onLeaseLost, "on-lease-lost", string(cm.LeaseLostExit), "leaderElection.onLeaseLost: Exit or Reelect")
	flag.StringVar(&cfg.journalPath, "journal", "", "file the journal is appended to; default stdout")
	flag.StringVar(&cfg.webhookAddr, "webhook-addr", "", "serve the validating webhook over TLS here (127.0.0.1:0 picks a port, journalled); default: no webhook")
	flag.StringVar(&cfg.webhookCert, "webhook-cert", "", "the webhook server's certificate (PEM)")
	flag.StringVar(&cfg.webhookKey, "webhook-key", "", "the webhook server's key (PEM)")
	flag.DurationVar(&cfg.startTimeout, "start-timeout", 30*time.Second, "Start's startTimeout: bounds each round of recovery and start")
	flag.DurationVar(&cfg.stopTimeout, "stop-timeout", 10*time.Second, "bounds ShutdownAndWait after SIGTERM")
	flag.DurationVar(&cfg.observeEvery, "observe-every", 50*time.Millisecond, "how often the observed lease holder is read from the manager's status")
	flag.StringVar(&cfg.writerCM, "writer-configmap", "", "run a writer controller patching this ConfigMap of the lease namespace; default: none")
	flag.BoolVar(&cfg.writerGuard, "writer-guard", true, "fence the writer's clientset with GuardTransport and its lease guard")
	flag.DurationVar(&cfg.writerEvery, "writer-every", 20*time.Millisecond, "how often the writer writes")
	flag.IntVar(&cfg.shards, "shards", 0, "leaderElection.shards; > 1 runs the sharded controllers (sharded.go); default: the single Lease")
	flag.StringVar(&cfg.elector, "elector", "manager", "manager: the runtime's election; client-go: the previous release's, client-go's LeaderElector on a LeaseLock, run directly (previous.go)")
	flag.StringVar(&cfg.groups, "groups", "", "comma-separated tenants: one group per tenant (groups.go) instead of the three controllers; default: none")
	flag.StringVar(&cfg.crashStore, "crash-store", "", "with --groups: this tenant's store fails shortly after every Recover (a crash loop)")
	flag.StringVar(&cfg.stopGroup, "stop-group", "", "with --groups: stop this tenant's group by request (StopChild) once it runs")
	flag.StringVar(&cfg.fleetLabel, "fleet-label", "", "run a fleet (fleet.go) of the kubeconfig Secrets of the lease namespace this label selector picks, instead of the other controllers; default: none")
	flag.StringVar(&cfg.metricsAddr, "metrics-addr", "", "serve the manager's metrics over HTTP here, at /metrics (127.0.0.1:0 picks a port, journalled); default: none")
	flag.Parse()

	out := os.Stdout
	if cfg.journalPath != "" {
		f, err := os.OpenFile(cfg.journalPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "replica:", err)
			os.Exit(2)
		}
		out = f
	}
	rec := journal.NewWriter(out, cfg.identity)
	rec.Write(journal.Entry{Kind: journal.Begin, PID: os.Getpid()})

	// Registered first, so that a SIGTERM sent as soon as the replica shows signs of
	// life is never lost.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, cfg, rec)
	stop()
	code := 0
	if err != nil {
		code = 1
		fmt.Fprintln(os.Stderr, "replica:", err)
		rec.Write(journal.Entry{Kind: journal.Exit, Code: code, Err: err.Error()})
	} else {
		rec.Write(journal.Entry{Kind: journal.Exit})
	}
	os.Exit(code)
}

// run runs the replica until ctx ends or the manager stops by itself, and returns why
// it stopped: nil after a requested stop.
func run(ctx context.Context, cfg config, rec *journal.Writer) error {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("replica", cfg.identity)

	restConfig, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig %q: %w", cfg.kubeconfig, err)
	}
	if cfg.shards > 1 {
		// A replica renews every shard it holds and its member Lease each retry
		// period: (S + 1) / RetryPeriod writes a second, 26 at S = 12 and 500ms, past
		// client-go's default limit of 5 (burst 10), which would queue renewals past
		// the renew deadline. Its 2S informers' lists count against it too.
		restConfig.QPS, restConfig.Burst = 200, 400
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}

	tenants, err := parseGroups(cfg.groups)
	if err != nil {
		return err
	}
	for flagName, tenant := range map[string]string{"--crash-store": cfg.crashStore, "--stop-group": cfg.stopGroup} {
		if tenant != "" && !slices.Contains(tenants, tenant) {
			return fmt.Errorf("%s %q: not one of --groups %q", flagName, tenant, cfg.groups)
		}
	}
	if len(tenants) > 0 && cfg.shards > 1 {
		return errors.New("--groups and --shards > 1 cannot be combined")
	}

	if cfg.elector == "client-go" {
		return runPrevious(ctx, cfg, rec, client, logger)
	}
	yes := true
	spec := cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled:        &yes,
			LeaseName:      cfg.leaseName,
			LeaseNamespace: cfg.leaseNamespace,
			LeaseDuration:  metav1.Duration{Duration: cfg.leaseDuration},
			RenewDeadline:  metav1.Duration{Duration: cfg.renewDeadline},
			RetryPeriod:    metav1.Duration{Duration: cfg.retryPeriod},
			OnLeaseLost:    cm.LeaseLostAction(cfg.onLeaseLost),
			Shards:         int32(cfg.shards),
		},
	}
	opts := []cm.Option{cm.WithLogger(logger)}
	if cfg.identity != "" {
		opts = append(opts, cm.WithIdentity(cfg.identity))
	}
	mgr, err := cm.NewControllerManager(cm.NewContext(client), spec, "replica", opts...)
	if err != nil {
		return err
	}
	cancelEvents := mgr.Subscribe(func(e cm.Event) {
		entry := journal.Entry{
			Time: e.Time.UnixNano(), Kind: journal.Supervision, Type: string(e.Type),
			Child: e.Child, ChildKind: e.Kind, Phase: string(e.Phase), Restarts: e.Restarts,
			Shard: e.Shard,
		}
		if e.Err != nil {
			entry.Err = e.Err.Error()
		}
		rec.Write(entry)
	})
	defer cancelEvents()

	switch {
	case cfg.fleetLabel != "":
		if err := addFleet(mgr, client, cfg.leaseNamespace, cfg.fleetLabel, cfg.identity, rec); err != nil {
			return err
		}
	case cfg.shards > 1:
		addShardedControllers(mgr, cfg.shards, client, cfg.leaseNamespace, rec)
	case len(tenants) > 0:
		addGroups(mgr, tenants, cfg.crashStore, client, cfg.leaseNamespace, rec)
	default:
		mgr.Add(
			newTicker("reconciler-a", rec),
			newTicker("reconciler-b", rec),
			newConfigMapWatcher("configmaps", client, cfg.leaseNamespace, rec),
		)
	}
	if cfg.writerCM != "" {
		mgr.Add(&writer{
			activity: activity{name: "writer", rec: rec}, restConfig: restConfig, namespace: cfg.leaseNamespace,
			configMap: cfg.writerCM, identity: cfg.identity, guarded: cfg.writerGuard, every: cfg.writerEvery,
		})
	}

	// The webhook server serves from before the election, as a standby's must.
	var servers sync.WaitGroup
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer func() { stopServing(); servers.Wait() }()
	if cfg.webhookAddr != "" {
		mgr.Add(newPolicyWebhook("configmap-policy", "/validate", cfg.identity, rec))
		srv, err := cm.NewWebhookServer(cm.WebhookServerConfig{
			Addr: cfg.webhookAddr, CertFile: cfg.webhookCert, KeyFile: cfg.webhookKey,
			Handler: mgr.Handler(), Probes: health.NewHandler(mgr), Logger: logger,
		})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.webhookAddr)
		if err != nil {
			return fmt.Errorf("webhook server: %w", err)
		}
		rec.Write(journal.Entry{Kind: journal.WebhookServing, Addr: ln.Addr().String()})
		servers.Go(func() {
			if err := srv.Serve(serveCtx, ln); err != nil {
				logger.Error("webhook server failed", "err", err)
			}
		})
	}

	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics server: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", health.MetricsHandler(mgr.Gatherer()))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		rec.Write(journal.Entry{Kind: journal.MetricsServing, Addr: ln.Addr().String()})
		servers.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("metrics server failed", "err", err)
			}
		})
		servers.Go(func() { <-serveCtx.Done(); _ = srv.Close() })
	}
	if cfg.stopGroup != "" {
		servers.Go(func() { stopGroupWhenRunning(serveCtx, mgr, cfg.stopGroup, cfg.observeEvery, rec) })
	}

	servers.Go(func() { observeLeader(serveCtx, mgr, cfg.observeEvery, rec) })

	// Serve is the whole host loop: Start, wait for SIGTERM or for the manager to stop
	// by itself, ShutdownAndWait within the stop timeout. It returns nil after SIGTERM,
	// also on a standby still waiting for the lease, and otherwise why the manager
	// stopped (a lost lease with --on-lease-lost=Exit, an escalation, a failed start,
	// children not stopped within the stop timeout).
	err = mgr.Serve(ctx, cfg.startTimeout, cfg.stopTimeout)
	shutdown := journal.Entry{Kind: journal.ShutdownReturned}
	if err != nil {
		shutdown.Err = err.Error()
	}
	rec.Write(shutdown)
	if err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return rec.Err()
}

// observeLeader journals each change of the lease holder the manager has observed,
// with sharding each change of a shard's observed holder (journal.ShardHolder), and
// with groups each change of a group's state (journal.GroupState).
func observeLeader(ctx context.Context, mgr *cm.ControllerManager, every time.Duration, rec *journal.Writer) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := ""
	shards := map[int]cm.ShardStatus{}
	groups := groupStates{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-mgr.Done():
			return
		case <-tick.C:
		}
		askCtx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := mgr.Status(askCtx)
		cancel()
		if err != nil {
			continue
		}
		groups.observe(st, rec)
		for _, sh := range st.Shards {
			seen, ok := shards[sh.Index]
			if ok && seen.Holder == sh.Holder && seen.Held == sh.Held {
				continue
			}
			e := journal.Entry{Kind: journal.ShardHolder, Shard: sh.Index, Leader: sh.Holder, Held: sh.Held, Name: sh.Lease}
			if !ok {
				e.Children = sh.Children
			}
			rec.Write(e)
			shards[sh.Index] = sh
		}
		if st.LeaderIdentity == last {
			continue
		}
		last = st.LeaderIdentity
		rec.Write(journal.Entry{Kind: journal.Leader, Leader: last})
	}
}
