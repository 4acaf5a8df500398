package chaos

import (
	"fmt"
	"sync/atomic"
	"time"
)

// FaultKind is one way of failing.
type FaultKind uint8

// The faults a child can be made to have.
const (
	// FaultReport: the running incarnation's background work reports a
	// failure, through the FailureReporter of its start context.
	FaultReport FaultKind = iota + 1
	// FaultHealthPanic: the next GetHealth (controllers) or Ready (webhooks)
	// panics.
	FaultHealthPanic
	// FaultUnhealthy: health answers are unhealthy for a while.
	FaultUnhealthy
	// FaultHealthHang: health calls hang for a while (the probe hears
	// nothing).
	FaultHealthHang
	// FaultStartError: the next start call (a restart's) returns an error.
	FaultStartError
	// FaultStartPanic: the next start call panics.
	FaultStartPanic
	// FaultSlowShutdown: the next Shutdown takes a while, returning early
	// when its context ends.
	FaultSlowShutdown
	// FaultHungShutdown: the next Shutdown ignores its context and hangs
	// for a while (well under ShutdownTimeout, or a restart escalates).
	FaultHungShutdown
	// FaultShutdownPanic: the next Shutdown panics (the child counts as
	// stopped).
	FaultShutdownPanic
	// FaultHandlePanic: the next Handle panics (webhooks).
	FaultHandlePanic
	// FaultHandleErrors: the next few Handle calls return errors, one more
	// than the webhook's failure threshold.
	FaultHandleErrors
	// FaultHandleSlow: the next Handle outlives its request's deadline.
	FaultHandleSlow

	numFaultKinds
)

var faultNames = [...]string{"", "Report", "HealthPanic", "Unhealthy", "HealthHang", "StartError", "StartPanic",
	"SlowShutdown", "HungShutdown", "ShutdownPanic", "HandlePanic", "HandleErrors", "HandleSlow"}

// String names the kind of fault.
func (k FaultKind) String() string {
	if int(k) < len(faultNames) {
		return faultNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", k)
}

// faultsFor lists the faults that apply to a child of kind.
var faultsFor = map[string][]FaultKind{
	"controller": {FaultReport, FaultHealthPanic, FaultUnhealthy, FaultHealthHang, FaultStartError, FaultStartPanic,
		FaultSlowShutdown, FaultHungShutdown, FaultShutdownPanic},
	"store": {FaultReport, FaultStartError, FaultStartPanic, FaultSlowShutdown, FaultHungShutdown, FaultShutdownPanic},
	"webhook": {FaultReport, FaultHealthPanic, FaultUnhealthy, FaultHealthHang, FaultStartError, FaultStartPanic,
		FaultSlowShutdown, FaultHungShutdown, FaultShutdownPanic, FaultHandlePanic, FaultHandleErrors, FaultHandleSlow},
}

// Fault is one fault as it struck: the error (or panic value) a child
// produced for it.
type Fault struct {
	Seq   uint64
	Child string
	Kind  FaultKind
	// Inc is the child's incarnation (its start calls so far) when the
	// fault struck.
	Inc int
	At  time.Time

	counted atomic.Int32 // ChildFailed events naming it
}

// Error describes the injected fault.
func (f *Fault) Error() string {
	return fmt.Sprintf("chaos: fault #%d (%s) of %s in incarnation %d", f.Seq, f.Kind, f.Child, f.Inc)
}
