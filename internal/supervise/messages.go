package supervise

import (
	"context"
	"time"

	"github.com/actorkube/controllermanager/internal/childactor"
)

// Facade plumbing: StartManager starts the manager with Children (in the order they were
// added). StartTimeout > 0 bounds recovery plus start. Ctx is the caller's:
// its end cancels the start. Answered once the manager is Running, or with
// the error that ended the start.
type StartManager struct {
	Ctx          context.Context
	StartTimeout time.Duration
	Children     []childactor.Spec
	// Err, when set, is why the start cannot begin (children that could not
	// be named): the manager fails with it.
	Err error
}

// GatherHealth asks the supervisor to query every controller's health into
// Collector: it calls Collector.Expect, then sends the queries. Before the
// manager is starting it expects nothing (health is empty until then).
type GatherHealth struct {
	Collector *childactor.HealthCollector
}
