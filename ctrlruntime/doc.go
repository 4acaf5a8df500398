// Package ctrlruntime hosts sigs.k8s.io/controller-runtime code (reconcilers,
// manager.Runnables, admission handlers) as supervised children of a
// controllermanager manager, keeping the API controller-runtime users know.
//
// It is a module of its own (github.com/actorkube/controllermanager/ctrlruntime),
// so that the controllermanager library itself never requires
// controller-runtime.
//
// # A kubebuilder project: NewManager
//
// NewManager returns a *Manager, which implements controller-runtime's
// manager.Manager on a controllermanager.ControllerManager. A project laid
// out by kubebuilder moves over by changing the ctrl.NewManager line of
// cmd/main.go (and of suite_test.go) to ctrlruntime.NewManager, and the
// builder line of each SetupWithManager(mgr ctrl.Manager) error to
// ctrlruntime.NewControllerManagedBy(mgr): each reconciler is then a
// supervised child, restarted alone, on a cache warm before the election.
// The builder is controller-runtime's, every method and option; given any
// other manager.Manager (ctrl.NewManager's, in a test or a binary not yet
// moved) it is exactly ctrl.NewControllerManagedBy(mgr), so the move can
// be undone line by line.
// Webhooks (ctrl.NewWebhookManagedBy), field indexes, health checks and the
// metrics server stay as written; see docs/migrating.md and
// examples/kubebuilder.
//
// # What maps to what, without the Manager
//
//	controller-runtime                         here
//	manager.Manager                            controllermanager.ControllerManager (and WebhookManager)
//	manager.New(config, Options{...})          NewContext(config, ContextOptions{...}), then
//	                                           controllermanager.NewControllerManager(ctx, spec, lease)
//	mgr.GetCache / GetClient / GetScheme       (*Context).GetCache / GetClient / GetScheme
//	the manager's cache, started before        one shared cache.Cache per Context, started in the
//	  election, informers created lazily         pre-flight (Context.Start) with the informers of every
//	  by controllers after it                    watched kind: a standby is warm, a failover does not relist
//	builder.ControllerManagedBy(mgr)           NewControllerManagedBy(ctx): controller-runtime's
//	  .For().Owns().Watches().Complete(r)        builder, every method and option; Build(r) -> *Controller
//	controller.NewTyped(name, mgr, opts)       New[request](ctx, name, r, opts, sources...)
//	controller.Options                         Options: MaxConcurrentReconciles, RateLimiter, ...,
//	                                           plus how the supervisor judges the reconciler
//	a controller, one per process, started     a supervised Controller: every Run builds a fresh
//	  once ("started more than once")            controller-runtime controller, queue and sources
//	reconcile.Reconciler / TypedReconciler     the same, unchanged
//	RecoverPanic: a panic becomes an error     the same, counted, logged and retried with backoff;
//	  (false: the process ends)                  false: a failure, the reconciler restarts alone
//	mgr.Add(manager.Runnable)                  NewRunnable(name, build): a fresh Runnable per restart
//	LeaderElectionRunnable.NeedLeaderElection  the same: false runs a runnable or controller on
//	                                             every replica, standby included
//	a Runnable's error stops the manager       the child restarts alone (strategy, backoff, budget)
//	webhook.Server + admission.Handler         NewWebhook(name, path, h), served by a manager's Handler
//	mgr.AddHealthzCheck                        GetHealth of every child, with a deadline: unsynced
//	                                             caches, a stuck reconcile, a high error rate
//	metrics.Registry (global)                  MetricsCollector / ContextOptions.Registerer: the same
//	                                             metrics on the manager's Registerer
//	LeaderElection: true, os.Exit on loss      LeaderElectionSpec on the Context's clientset; fenced,
//	                                             then Err() wraps lease.ErrLost
//
// # Lifecycle of a reconciler
//
// A *Controller is a controllermanager.Controller: the manager calls Run once
// elected, and Shutdown then Run again for each restart. Run builds a
// controller-runtime controller (controller.NewTypedUnmanaged), starts its
// sources on the shared cache, waits until they have synced, starts its
// workers on a context of its own and returns. Shutdown ends that context:
// the sources stop feeding the queue, the queue shuts down, and Shutdown
// waits for the reconciles in flight, bounded by its context. The event
// handlers an incarnation added to the shared informers are removed, so
// restarts leak none.
//
// A reconcile that ignores its context outlives a restart's Shutdown: the
// next incarnation starts, and requeues that key until the old reconcile
// has returned. But when the lease is lost, or the Manager shuts down,
// Shutdown does not return while it runs, so that the Lease is never
// handed to another replica while this one still reconciles: Start
// returns an error naming the reconciler (an *UnstoppedError; with a lost
// lease, the fence fails at its timeout), the Lease is kept until the
// reconcile returns or the process exits, and expires then.
// controller-runtime, at the end of GracefulShutdownTimeout, gives the
// Lease up while such a reconcile still runs. A watch that stops
// delivering (a stalled connection, a source whose channel is closed) is
// noticed neither here nor there: client-go's reflector ends each watch
// after 5 to 10 minutes and resumes it (an informer that has stopped does
// make the reconciler unhealthy, below). ReconciliationTimeout bounds a
// reconcile that honours its context.
//
// # Health and failures
//
// GetHealth is unhealthy, with every reason in its message, while:
//   - the caches of the watched kinds have not synced;
//   - one reconcile has been running for Options.StuckAfter (default 1m);
//   - at least Options.ErrorRateThreshold (default half) of the requests
//     reconciled in the last Options.ErrorRateWindow (default 1m) failed
//     their last reconcile, once Options.ErrorRateMinReconciles (default
//     10) requests were reconciled in it: one object failing for ever,
//     however often it is retried, is one failing request.
//
// The supervisor restarts a controller after SupervisionSpec.UnhealthyThreshold
// unhealthy probes in a row. A reconcile that panics is handled by
// controller-runtime, as under its own manager: counted in
// controller_runtime_reconcile_panics_total, logged as "Observed a panic"
// with its stack on the controller's logger, and retried like an error,
// with the rate limiter's backoff, while the reconciler goes on with its
// other requests: a poison object neither restarts the reconciler nor
// spends the restart budget. Such a panic fails no child, so the
// manager's own observability, which follows failures, does not see it:
// no supervision event (Subscribe), no controllermanager_child_panics_total,
// no Kubernetes Event. Watch controller_runtime_reconcile_panics_total
// (label controller: the reconciler's child name), which a Manager serves
// on its metrics server and a Context puts on ContextOptions.Registerer
// (alert on increase(controller_runtime_reconcile_panics_total[1h]) > 0
// beside controllermanager_child_panics_total); the reconciler's health
// message (GetHealth, Status, /healthz?verbose, the live view) also counts
// the panics of its incarnation and names the last one's request and
// value. With Options.RecoverPanic false (under
// controller-runtime, the panic would end the process), or at a positive
// Options.PanicThreshold, the panic is also reported through
// controllermanager.FailureReporter (and counted in
// controllermanager_child_panics_total), and the supervisor restarts that
// reconciler alone, the others reconciling on.
//
// # Sharded leadership
//
// With LeaderElectionSpec.Shards > 1, build one reconciler per shard with
// the manager's AddSharded and Builder.ForShard (or ShardReconciler): each
// reconciles only the keys its Shard owns, on whichever replica holds that
// shard's Lease, so the replicas share the objects of one kind. Build them
// on a Context (a Manager's is Manager.Context): Build on a Manager adds
// the reconciler to it, as controller-runtime's Build does.
package ctrlruntime
