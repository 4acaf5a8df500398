package statespace

import (
	"fmt"
	"strings"
	"time"
)

// Result is what one sequence did and found.
type Result struct {
	Scenario   Scenario
	Violations []Violation
	// Excused are Unfenced violations that a pause of the whole process
	// longer than half the fence budget explains (the paused-process limit
	// no lease can fence), and RenewableLost ones that the replica's own
	// silence explains (no Lease write at all for that long): logged, not
	// failed.
	Excused []Violation
	Steps   int  // steps run
	Answers int  // lifecycle calls answered nil and judged (AnswerWrong)
	Reelect bool // whether its re-election was judged (NotReelected)
	Skipped int  // steps whose phase did not come
	// Dropped is how many Lease watch events its stalled watches dropped
	// (DoStallWatch): a stall that drops none has tested nothing.
	Dropped int
	// ListsHeld is how many Lease lists its hung lists held (DoHangList).
	ListsHeld int
	// HungContained and HungEscalated count the restarts whose Shutdown
	// outlived ShutdownTimeout: failed groups that stop on their own
	// (contained), and escalations of the manager.
	HungContained, HungEscalated int
	// GroupProbes is how many children made unhealthy it judged at the
	// health timing of a group of their own, not the manager's (NotProbed).
	GroupProbes int
	// Handled is how many webhook Handle calls it judged (HandleOutside,
	// HandleBesideShutdown).
	Handled int
	// Fleet sequences (WithFleet): FleetBuilds is how many times the fleet
	// built a member's subtree (FleetContextOverlap judged each one after
	// the first), FleetOffline how many ClusterOffline events came while
	// the member's API server was down (OfflineRan judged what followed),
	// FleetDisengaged how many ClusterDisengaged (DisengagedRan), and
	// ClustersEnded how many Clusters were found ended, refusing writes,
	// once the manager had stopped; FleetOnlineDown how many ClusterOnline
	// events came while the member's API server was down (OnlineWhileDown
	// judged each one); FleetOutages how many outages of a
	// member found before the fleet said them OfflineLate judged;
	// FleetOnline how many ClusterOnline events OnlineEarly judged;
	// FleetRestarted how many stops of a member's group followed by a start
	// of it OutageUnsaid judged.
	FleetBuilds, FleetOffline, FleetDisengaged, ClustersEnded, FleetOutages, FleetOnlineDown, FleetOnline, FleetRestarted int
	Took                                                                                                                  time.Duration
	MaxPause                                                                                                              time.Duration
	Log                                                                                                                   []string // what each step did, and the manager's events
}

// Failed reports whether the sequence broke an invariant.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Report is the whole story of a failed sequence: the scenario, what
// happened and what broke.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s: %s\n", r.Scenario.Name, r.Scenario)
	fmt.Fprintf(&b, "ran %d steps (%d skipped) in %s; longest process pause %s\n", r.Steps, r.Skipped, r.Took.Round(time.Millisecond), r.MaxPause.Round(time.Millisecond))
	b.WriteString("what happened:\n")
	for _, l := range r.Log {
		b.WriteString("  " + l + "\n")
	}
	for _, v := range r.Excused {
		b.WriteString("excused (process paused): " + v.String() + "\n")
	}
	for _, v := range r.Violations {
		b.WriteString("VIOLATION " + v.String() + "\n")
	}
	return b.String()
}
