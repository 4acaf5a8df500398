package lease

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Config configures an elector. Every field but Logger and Watchdog is
// required; NewProps checks them as client-go does.
type Config struct {
	// Lock is the lease: a resourcelock.LeaseLock (NewLeaseLock) or any
	// resourcelock.Interface. Every elector spawned from one Props uses it,
	// one election at a time.
	Lock resourcelock.Interface
	// LeaseDuration is how long a standby waits, after the last change of
	// the lease it observed, before it takes the lease over. The Lease
	// stores it in whole seconds.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a failed renewal
	// before it reports Lost.
	RenewDeadline time.Duration
	// RetryPeriod is the time between two attempts to acquire or renew.
	RetryPeriod time.Duration
	// Logger receives client-go's leader-election logs (through the context,
	// leaving the process-wide klog alone). Nil discards them.
	Logger *slog.Logger
	// Watchdog, when set, watches every election the elector runs; see
	// Watchdog.
	Watchdog *Watchdog
}

// FenceBudget is the least time between the moment a leader reports Lost
// and the moment another replica may acquire the lease:
// LeaseDuration − RenewDeadline − RetryPeriod.
//
// client-go renews every RetryPeriod and gives up (Lost) once a renewal has
// failed for RenewDeadline, so Lost comes at most RetryPeriod + RenewDeadline
// after the last successful renewal. A standby measures LeaseDuration from
// the moment it observed that renewal, which is no earlier than the moment
// it was written. The budget is shortened by the latency of that last
// renewal's response and by any difference between the replicas' clock
// rates; FenceTimeout leaves a margin for both.
func (c Config) FenceBudget() time.Duration {
	return c.LeaseDuration - c.RenewDeadline - c.RetryPeriod
}

// FenceTimeout is how long a manager gives its controllers to stop after
// Lost: four fifths of FenceBudget, the rest being the margin for network
// latency and clock-rate drift. It is not positive when the durations leave
// no budget.
func (c Config) FenceTimeout() time.Duration {
	return c.FenceBudget() * 4 / 5
}

// stallThreshold is how long after its last successful renewal a leader
// declares the lease lost by itself, should client-go's renew loop be stuck
// (a lock call that ignores its context): half a retry period after the
// moment client-go itself would have given up.
func (c Config) stallThreshold() time.Duration {
	return c.RenewDeadline + c.RetryPeriod + c.RetryPeriod/2
}

// validate reports what client-go would reject, and a lease duration that
// leaves no time to fence.
func (c Config) validate() error {
	if c.Lock == nil {
		return fmt.Errorf("lease: no lock")
	}
	// client-go's own checks, with no-op callbacks.
	if _, err := leaderelection.NewLeaderElector(c.electionConfig(leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {},
	})); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	if c.FenceTimeout() <= 0 {
		return fmt.Errorf("lease: leaseDuration %s leaves no time to fence: it must exceed renewDeadline %s + retryPeriod %s",
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
	}
	return nil
}

// electionConfig is client-go's configuration. ReleaseOnCancel is off on
// purpose: client-go would release the lease as soon as its renew loop ends,
// also when a renewal failed and before the controllers are fenced. The
// elector releases the lease itself, and only on Resign.
func (c Config) electionConfig(cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock:            c.Lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		Callbacks:       cb,
		ReleaseOnCancel: false,
		Name:            c.Lock.Describe(),
	}
}

// deadlineReason is why a leader lost the lease when client-go's renew loop
// gave up (or the election ended with err), with the figures.
func (c Config) deadlineReason(err error) string {
	if err != nil { // its first line: a panic's stack is logged apart
		first, _, _ := strings.Cut(err.Error(), "\n")
		return "the election ended with an error: " + first
	}
	return fmt.Sprintf("no renewal succeeded within the renew deadline (%s)", c.RenewDeadline)
}

// stallReason is why a leader lost the lease when its renewals stalled past
// stallThreshold, with the figures.
func (c Config) stallReason() string {
	return fmt.Sprintf("not renewed for more than %s (renew deadline %s + 1.5 × retry period %s)",
		c.stallThreshold(), c.RenewDeadline, c.RetryPeriod)
}
