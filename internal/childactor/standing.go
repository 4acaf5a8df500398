package childactor

import "github.com/actorkube/controllermanager/actors"

// Standing is where a child stands in its life when it cannot answer for
// itself: a health query, or an admission call, that finds it not running.
// It is the one mapping from a child's state to what is said of it; the
// supervisor's health answers (from its ChildState), the child's own health
// answers and its admission refusals (from its actor's state) all read it,
// so a child reads the same whichever of them answers.
type Standing uint8

// The standings. Each says what a child in it reports, healthy or not.
const (
	// StandingNotStarted: added, its first start still to come. Healthy:
	// waiting (for the lease, for the stores) is not a failure.
	StandingNotStarted Standing = iota
	// StandingStarting: its start call (Run, Recover, Start) is running.
	StandingStarting
	// StandingStartFailed: its start call failed; its Shutdown is owed and
	// the supervisor is deciding what follows.
	StandingStartFailed
	// StandingBackingOff: shut down after a failure, waiting to start again.
	StandingBackingOff
	// StandingStopping: its Shutdown is running.
	StandingStopping
	// StandingStopped: shut down, with its manager or for good.
	StandingStopped
	// StandingStoppedOnRequest: stopped by StopChild. Healthy: it is where
	// it was asked to be.
	StandingStoppedOnRequest
	// StandingIdle: nothing running, as its actor sees it: between a
	// failure and its restart, or stopped (only the supervisor knows which).
	StandingIdle
)

var standings = [...]struct {
	healthy bool
	words   string
}{
	StandingNotStarted:       {true, "not started yet"},
	StandingStarting:         {false, "starting"},
	StandingStartFailed:      {false, "failing to start"},
	StandingBackingOff:       {false, "restarting after a failure"},
	StandingStopping:         {false, "shutting down"},
	StandingStopped:          {false, "stopped"},
	StandingStoppedOnRequest: {true, "stopped by StopChild"},
	StandingIdle:             {false, "not running (restarting or stopped)"},
}

// String is what s says of a child, worded to follow "is": "shutting down".
func (s Standing) String() string {
	if int(s) >= len(standings) {
		return "not running"
	}
	return standings[s].words
}

// Status is the health of the child named name in standing s. cause, when
// not nil, is the failure that put it there; it ends the message.
func (s Standing) Status(name string, cause error) actors.HealthStatus {
	st := actors.HealthStatus{Name: name, Message: s.String()}
	if int(s) < len(standings) {
		st.Healthy = standings[s].healthy
	}
	if cause != nil {
		st.Message += ": " + cause.Error()
	}
	return st
}
