package lease

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// ErrRenewalOverdue is wrapped by Watchdog.Check's error: this replica holds
// the lease but has not renewed it for longer than the lease duration plus
// the grace.
var ErrRenewalOverdue = errors.New("lease: renewal overdue")

// DefaultWatchdogGrace is the Watchdog's grace when none is given.
const DefaultWatchdogGrace = defaults.WatchdogGrace

// Watchdog is a health check in the manner of client-go's HealthzAdaptor: it
// fails while this replica's elector believes it holds the lease but its last
// successful renewal is older than the lease duration plus a grace. That
// happens only when the election itself is stuck (a lock call that never
// returns, a wedged process): a live elector reports Lost, and the manager
// fences, well before. A failing liveness probe then has the kubelet restart
// the process, the only fence left.
//
// Standbys and managers whose election has ended are healthy. A nil
// *Watchdog is a valid check that always passes, so that a manager without
// election can hand one out.
type Watchdog struct {
	grace time.Duration
	check func(grace time.Duration) error
}

// NewWatchdogFor returns a Watchdog over an elector (lease/shard's: every
// shard it holds): check returns an error when a lease held has not been
// renewed for its duration plus grace. grace <= 0 means
// DefaultWatchdogGrace.
func NewWatchdogFor(grace time.Duration, check func(grace time.Duration) error) *Watchdog {
	if grace <= 0 {
		grace = DefaultWatchdogGrace
	}
	return &Watchdog{grace: grace, check: check}
}

// Name is the check's name: "leaderElection", as client-go's.
func (w *Watchdog) Name() string { return "leaderElection" }

// Check returns nil unless this replica leads and its last renewal is older
// than the lease duration plus the grace; then an error wrapping
// ErrRenewalOverdue. The request is not used.
func (w *Watchdog) Check(*http.Request) error {
	if w == nil {
		return nil
	}
	if w.check != nil {
		if err := w.check(w.grace); err != nil {
			return fmt.Errorf("%w: %v", ErrRenewalOverdue, err)
		}
	}
	return nil
}
