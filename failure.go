package controllermanager

import (
	"context"

	"github.com/actorkube/controllermanager/actors"
)

// ReportFailure reports err as a failure of the controller (or webhook, or
// store) whose Run (Start, Recover) received ctx, from any goroutine, at any
// time: the supervisor restarts it as its strategy says. It returns false,
// doing nothing, when ctx did not come from a manager. Keep the function of
// FailureReporter instead when the context will not outlive Run.
func ReportFailure(ctx context.Context, err error) bool {
	return actors.ReportFailure(ctx, err)
}

// FailureReporter returns the function that reports a failure of the child
// whose Run (Start, Recover) received ctx. It stays valid after Run returns;
// reports of an incarnation that has since been stopped are ignored. ok is
// false when ctx did not come from a manager.
func FailureReporter(ctx context.Context) (report func(err error), ok bool) {
	return actors.FailureReporter(ctx)
}
