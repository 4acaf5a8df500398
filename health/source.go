package health

import (
	"context"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Source is what the handler probes. Both managers of package
// controllermanager implement it, and the optional interfaces below.
type Source interface {
	// GetReadiness returns nil once the source is ready, else why not.
	GetReadiness() error
	// GetHealth returns the health of every controller.
	GetHealth() []actors.HealthStatus
}

// Stopper is implemented by a Source that stops for good: once Done is
// closed, the "phase" check fails with Err (nil after a requested stop).
type Stopper interface {
	Done() <-chan struct{}
	Err() error
}

// StatusSource is implemented by a Source with a supervisor: the "phase"
// check asks it for its Status, and fails when it does not answer within the
// timeout or reports PhaseStopped or PhaseFailed.
type StatusSource interface {
	Status(ctx context.Context) (supervisor.Status, error)
}

// TimeoutSource is implemented by a Source whose GetHealth returns within a
// bound of its own (a manager's SupervisionSpec.HealthTimeout): the handler
// takes it as its timeout unless WithTimeout says otherwise.
type TimeoutSource interface {
	HealthTimeout() time.Duration
}

// CheckProvider is implemented by a Source that has checks of its own to
// add to /healthz, such as the lease watchdog of a manager with election on.
// HealthzChecks is called on every /healthz request, so the set may change
// (empty before election starts, say); it must return at once. A check whose
// name is taken by one listed before it is ignored.
type CheckProvider interface {
	HealthzChecks() []Checker
}
