package actors

import (
	"context"

	"github.com/actorkube/controllermanager/internal/startctx"
)

// FailureReporter returns the function a child uses to report that its
// background work has failed, from the context passed to its Run (or Start, or
// Recover). The function is safe to call from any goroutine, at any time, any
// number of times: the supervisor handles the first report of an incarnation
// and ignores reports of an incarnation that has already been stopped or
// restarted. ok is false when ctx was not passed by a manager.
func FailureReporter(ctx context.Context) (report func(err error), ok bool) {
	inc, ok := startctx.From(ctx)
	if !ok {
		return func(error) {}, false
	}
	return func(err error) {
		if err == nil {
			err = ErrReported
		}
		inc.Report(err)
	}, true
}

// ReportFailure reports err as a failure of the child whose start context ctx
// is (or derives from). It returns false, and does nothing, when ctx was not
// passed by a manager.
func ReportFailure(ctx context.Context, err error) bool {
	report, ok := FailureReporter(ctx)
	if ok {
		report(err)
	}
	return ok
}
