package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	cm "github.com/actorkube/controllermanager"
)

// Runnable hosts a controller-runtime manager.Runnable as a supervised
// controllermanager.Controller. A manager.Runnable's Start blocks until its
// context ends, and most cannot be started twice, so every Run calls build
// for a fresh value and starts it in a goroutine of its own; Shutdown
// cancels its context and waits for Start to return.
//
// Start returning an error, or panicking, while it should run is a failure
// reported to the supervisor, which restarts it alone (controller-runtime's
// manager would stop). Start returning nil ends the runnable: it stays
// healthy, and is started again only by a restart. It runs only while the
// manager is elected, whatever its NeedLeaderElection says.
type Runnable struct {
	name  string
	build func() (manager.Runnable, error)

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	ended  error // why Start returned, once done is closed; nil: it returned nil
	exited bool
	runs   int
}

var (
	_ cm.Controller              = (*Runnable)(nil)
	_ interface{ Name() string } = (*Runnable)(nil)
)

// NewRunnable hosts the runnables build returns, one per incarnation, under
// name (unique in its manager).
func NewRunnable(name string, build func() (manager.Runnable, error)) (*Runnable, error) {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if build == nil {
		errs = append(errs, errors.New("build is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ctrlruntime: runnable %q: %w", name, err)
	}
	return &Runnable{name: name, build: build}, nil
}

// Name is the runnable's name in the manager.
func (r *Runnable) Name() string { return r.name }

// Run builds a fresh runnable and starts it on a context that Shutdown
// ends; it returns once Start is running.
func (r *Runnable) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	inner, err := r.buildOne()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done, r.ended, r.exited = cancel, done, nil, false
	r.runs++
	r.mu.Unlock()
	go func() {
		err := r.start(runCtx, inner)
		r.mu.Lock()
		r.ended, r.exited = err, true
		r.mu.Unlock()
		close(done)
		if err != nil && runCtx.Err() == nil {
			report(err)
		}
	}()
	return nil
}

func (r *Runnable) buildOne() (inner manager.Runnable, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("ctrlruntime: runnable %q: build panicked: %v\n%s", r.name, v, debug.Stack())
		}
	}()
	inner, err = r.build()
	if err != nil {
		return nil, fmt.Errorf("ctrlruntime: runnable %q: build: %w", r.name, err)
	}
	if inner == nil {
		return nil, fmt.Errorf("ctrlruntime: runnable %q: build returned nil", r.name)
	}
	return inner, nil
}

func (r *Runnable) start(ctx context.Context, inner manager.Runnable) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("ctrlruntime: runnable %q: Start panicked: %v\n%s", r.name, v, debug.Stack())
		}
	}()
	if err := inner.Start(ctx); err != nil {
		return fmt.Errorf("ctrlruntime: runnable %q: %w", r.name, err)
	}
	return nil
}

// Shutdown cancels the runnable's context and returns once its Start has
// returned, whenever that is: ctx's end does not cut it short, since a
// Shutdown that returned with Start still running would let the tree start
// the next incarnation beside it, or give the Lease up while it runs. The
// supervision tree bounds the wait itself (SupervisionSpec.ShutdownTimeout):
// a restart it decides escalates, a shutdown names the runnable in its
// *UnstoppedError and keeps the Lease, and RestartChild waits (the child
// stays Stopping).
func (r *Runnable) Shutdown(_ context.Context) {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// GetHealth is healthy while Start runs, and after it returned nil;
// unhealthy, with Start's error, after it failed.
func (r *Runnable) GetHealth() cm.HealthStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done == nil:
		return cm.HealthStatus{Name: r.name, Message: "not started"}
	case !r.exited:
		return cm.HealthStatus{Name: r.name, Healthy: true, Message: "running"}
	case r.ended != nil:
		return cm.HealthStatus{Name: r.name, Message: r.ended.Error()}
	default:
		return cm.HealthStatus{Name: r.name, Healthy: true, Message: "Start returned"}
	}
}
