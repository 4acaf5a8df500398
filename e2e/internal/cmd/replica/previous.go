package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// runPrevious is --elector=client-go: a replica of the previous release, whose single
// lease was client-go's LeaderElector on a LeaseLock (ReleaseOnCancel), run here
// directly with the same three controllers, journalled as the manager's replicas are. On
// SIGTERM it stops its controllers, then cancels the elector, which releases the Lease;
// on a lost lease it stops them and returns an error (exit 1), as --on-lease-lost=Exit.
func runPrevious(ctx context.Context, cfg config, rec *journal.Writer, client kubernetes.Interface, logger *slog.Logger) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.leaseNamespace, Name: cfg.leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.identity},
	}
	controllers := []cm.Controller{newTicker("reconciler-a", rec), newTicker("reconciler-b", rec),
		newConfigMapWatcher("configmaps", client, cfg.leaseNamespace, rec)}
	var mu sync.Mutex
	running, stopping := false, false
	start := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopping {
			return
		}
		rec.Write(journal.Entry{Time: time.Now().UnixNano(), Kind: journal.Supervision, Type: "LeaderElected"})
		for _, c := range controllers {
			if err := c.Run(context.Background()); err != nil {
				logger.Error("controller failed to start", "err", err)
			}
		}
		running = true
	}
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		stopping = true
		if !running {
			return
		}
		running = false
		stopCtx, cancel := context.WithTimeout(context.Background(), cfg.stopTimeout)
		defer cancel()
		for _, c := range controllers {
			c.Shutdown(stopCtx)
		}
	}
	electCtx, cancelElection := context.WithCancel(context.Background())
	defer cancelElection()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: cfg.leaseDuration, RenewDeadline: cfg.renewDeadline, RetryPeriod: cfg.retryPeriod,
		ReleaseOnCancel: true, Name: cfg.leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { start() },
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				rec.Write(journal.Entry{Kind: journal.Leader, Leader: identity})
			},
		},
	})
	if err != nil {
		return err
	}
	elected := make(chan struct{})
	go func() { defer close(elected); le.Run(electCtx) }()
	select {
	case <-ctx.Done():
		stop()           // the controllers first ...
		cancelElection() // ... then the release
		<-elected
		rec.Write(journal.Entry{Kind: journal.ShutdownReturned})
		return rec.Err()
	case <-elected:
		stop()
		logger.Error("leader election lost")
		rec.Write(journal.Entry{Time: time.Now().UnixNano(), Kind: journal.Supervision, Type: "LeaderLost", Err: "lease: lost"})
		rec.Write(journal.Entry{Kind: journal.ShutdownReturned, Err: "lease: lost"})
		return errors.New("leader election lost")
	}
}
