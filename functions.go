package controllermanager

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// The seed's free functions, for hosts that run components without a
// manager. They keep the seed's contracts, except that a panic in a user
// call is recovered and becomes an error (a *PanicError naming the
// component) instead of crashing the process.

// RecoverStores recovers all stores in parallel and blocks until all of them
// have finished. It returns the first error (in the order of stores); one
// store's error does not cancel the others.
func RecoverStores(ctx context.Context, stores []Store) error {
	return runAll(len(stores), func(i int) error {
		name := fmt.Sprintf("#%d", i)
		return childactor.Call(actors.KindStore, name, "Recover", func() error {
			return stores[i].Recover(ctx)
		})
	})
}

// RunControllers runs every controller's Run in parallel and blocks until
// all have returned. It returns the first error (in the order of
// controllers); one controller's error does not cancel the others.
func RunControllers(ctx context.Context, controllers []Controller) error {
	return runAll(len(controllers), func(i int) error {
		return childactor.Call(actors.KindController, fmt.Sprintf("#%d", i), "Run", func() error {
			return controllers[i].Run(ctx)
		})
	})
}

// ShutdownRunnables calls every runnable's Shutdown(ctx) in parallel and
// blocks until all have returned. A panic in a Shutdown is logged with
// slog.Default and does not stop the others.
func ShutdownRunnables(ctx context.Context, controllers []Runnable) {
	_ = runAll(len(controllers), func(i int) error {
		err := childactor.Call(actors.KindRunnable, fmt.Sprintf("#%d", i), "Shutdown", func() error {
			controllers[i].Shutdown(ctx)
			return nil
		})
		if err != nil {
			slog.Default().Error("runnable panicked in Shutdown", "err", err)
		}
		return nil
	})
}

// StartWebhooksAndWait starts every webhook in parallel and blocks until all
// of them have started. The first error cancels the context the others were
// given, and is returned once all have returned.
func StartWebhooksAndWait(ctx context.Context, webhooks []Webhook) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	_ = runAll(len(webhooks), func(i int) error {
		err := childactor.Call(actors.KindWebhook, fmt.Sprintf("#%d", i), "Start", func() error {
			return webhooks[i].Start(ctx)
		})
		if err != nil {
			once.Do(func() { first = err; cancel() })
		}
		return nil
	})
	return first
}

// runAll runs fn(0..n-1) in parallel and returns the error of the lowest
// index that failed.
func runAll(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
