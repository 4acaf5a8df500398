package controllermanager

import (
	"context"
	"errors"
	"time"

	"github.com/actorkube/controllermanager/lease"
)

// Serve runs the manager as a host's main loop and returns why it stopped:
// nil after a stop the host asked for. It is the loop every host would
// otherwise write by hand around Start, Done and ShutdownAndWait:
//
//  1. Start(ctx, startTimeout): the pre-flight, the election (a standby
//     waits here for the lease), the stores, the controllers;
//  2. once started, it waits for ctx to end (the host's stop: SIGTERM) or
//     for Done (the manager stopped by itself: an escalation, a lost lease);
//  3. ShutdownAndWait, bounded by shutdownTimeout when it is positive (the
//     bound is a fresh timer: ctx has ended by then);
//  4. it returns nil when ctx ended and nothing else went wrong, also when
//     ctx ended while Start was still waiting for the lease or starting: a
//     standby stopped by SIGTERM returns nil. Otherwise it returns the error
//     that ended Start, or Err (an *EscalationError, an error wrapping
//     lease.ErrLost), and, when ShutdownAndWait gave up at shutdownTimeout,
//     the *UnstoppedError naming the children that did not stop.
//
// A host exits non-zero exactly when Serve returns an error:
//
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	if err := mgr.Serve(ctx, time.Minute, 30*time.Second); err != nil {
//		log.Fatal(err)
//	}
//
// Serve calls Start, so it is called instead of Start, once.
func (m *ControllerManager) Serve(ctx context.Context, startTimeout, shutdownTimeout time.Duration) error {
	return m.serve(ctx, func() error { return m.Start(ctx, startTimeout) }, shutdownTimeout)
}

// Serve runs the manager as a host's main loop and returns why it stopped:
// Start(ctx), then it waits for ctx to end or for Done, then
// ShutdownAndWait bounded by shutdownTimeout when it is positive; nil when
// ctx ended and nothing else went wrong. See ControllerManager.Serve.
func (m *WebhookManager) Serve(ctx context.Context, shutdownTimeout time.Duration) error {
	return m.serve(ctx, func() error { return m.Start(ctx) }, shutdownTimeout)
}

func (m *BaseManager) serve(ctx context.Context, start func() error, shutdownTimeout time.Duration) error {
	startErr := start()
	if startErr == nil {
		select {
		case <-ctx.Done():
		case <-m.Done():
		}
	}

	stopCtx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if shutdownTimeout > 0 {
		stopCtx, cancel = context.WithTimeout(stopCtx, shutdownTimeout)
	}
	defer cancel()
	m.ShutdownAndWait(stopCtx)

	cause := m.handle.Observed.Err()
	if startErr != nil {
		cause = startErr
		if cancelledBy(ctx, startErr) {
			// Start gave up because the host asked to stop; the manager's
			// own Err is that same cancellation, or nil, unless something
			// else (a lost lease) ended it first.
			if own := m.handle.Observed.Err(); own != nil && !cancelledBy(ctx, own) {
				cause = own
			} else {
				cause = nil
			}
		}
	}
	if u := m.unstopped.Load(); u != nil {
		return errors.Join(cause, u)
	}
	return cause
}

// cancelledBy reports whether err is ctx's own end, ctx having ended: not a
// lost lease nor an escalation that happened to wrap a context error.
func cancelledBy(ctx context.Context, err error) bool {
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return false
	}
	var esc *EscalationError
	return !errors.Is(err, lease.ErrLost) && !errors.As(err, &esc)
}
