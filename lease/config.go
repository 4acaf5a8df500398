package lease

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// Config configures an elector. Lock and the three durations are required;
// NewProps checks them as client-go does.
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
	// Fence, when set, is told the send time of every successful renewal of
	// every election the elector runs, and when each ends; see Fence.
	Fence *Fence
	// ClockSkewMargin is what the Fence takes off the lease duration after
	// each successful renewal's send time: the allowance for the other
	// replicas' clocks running faster than this one's, and for the time a
	// write that passed the check takes to reach the API server. Default
	// (zero): FenceBudget − FenceTimeout, the margin the fence timeout
	// already leaves for the same two things, so that the guard never
	// trusts the lease longer than the fence timeout does. A value set must
	// be at least that, and less than the recorded lease duration less
	// RenewDeadline (else the check would fail between healthy renewals).
	ClockSkewMargin time.Duration
	// Clock is the clock the Fence reads (monotonic, in production): send
	// times of renewals and the checks. Default: the real clock. client-go's
	// own timing always runs on the real clock.
	Clock clock.PassiveClock
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

// recordedDuration is the lease duration as the Lease records it, in whole
// seconds: the other replicas count it from their observation of a renewal,
// not LeaseDuration itself.
func (c Config) recordedDuration() time.Duration {
	return c.LeaseDuration.Truncate(time.Second)
}

// clockSkewMargin is ClockSkewMargin or its default.
func (c Config) clockSkewMargin() time.Duration {
	if c.ClockSkewMargin > 0 {
		return c.ClockSkewMargin
	}
	return c.FenceBudget() - c.FenceTimeout()
}

// guardValidity is how long after the send time of a successful renewal the
// Fence holds the lease.
func (c Config) guardValidity() time.Duration {
	return c.recordedDuration() - c.clockSkewMargin()
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
	if m := c.ClockSkewMargin; m != 0 {
		least, most := c.FenceBudget()-c.FenceTimeout(), c.recordedDuration()-c.RenewDeadline
		switch {
		case m < least:
			return fmt.Errorf("lease: clockSkewMargin %s is less than the margin the fence timeout leaves (%s = fenceBudget − fenceTimeout)", m, least)
		case m >= most:
			return fmt.Errorf("lease: clockSkewMargin %s must be less than the recorded leaseDuration %s − renewDeadline %s",
				m, c.recordedDuration(), c.RenewDeadline)
		}
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
