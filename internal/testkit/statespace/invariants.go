package statespace

import (
	"fmt"
	"time"
)

// Invariant names a promise of the manager that a sequence checks.
type Invariant string

// The invariants. Each Violation names one.
const (
	// TwoIncarnations: a child's start call began while an earlier
	// incarnation of it was still inside its Run→Shutdown interval.
	TwoIncarnations Invariant = "two-incarnations"
	// HandleOutside: a webhook's Handle began while no incarnation of it
	// was serving: before its start call had returned nil, or once its
	// Shutdown had begun (docs/webhooks.md: such a request is answered
	// 503 without reaching Handle).
	HandleOutside Invariant = "handle-outside"
	// HandleBesideShutdown: a webhook's Shutdown began while one of its
	// Handle calls, begun less than the drain's bound (HandleDrain) before,
	// still ran: every stop drains the Handle calls in flight first.
	HandleBesideShutdown Invariant = "handle-beside-shutdown"
	// ShutdownBesideStart: an incarnation's Shutdown began before its start
	// call had returned.
	ShutdownBesideStart Invariant = "shutdown-beside-start"
	// StartAfterShutdown: a start call returned nil after its incarnation's
	// Shutdown had returned: what it started is never stopped.
	StartAfterShutdown Invariant = "start-after-shutdown"
	// ShutdownTwice: a Shutdown with no incarnation to end, or a second one.
	ShutdownTwice Invariant = "shutdown-twice"
	// NotShutDown: once the manager has stopped and every call has returned,
	// an incarnation was never shut down.
	NotShutDown Invariant = "not-shut-down"
	// Unfenced: a controller or store was inside Run→Shutdown at a moment
	// this replica did not hold the lease (by the fake API server's
	// history: no renewal of its own within the lease duration before, or
	// a release of its own since).
	Unfenced Invariant = "unfenced"
	// ReleasedEarly: the lease was given up while a child's start call or
	// Shutdown had not returned.
	ReleasedEarly Invariant = "released-before-shutdown"
	// FailureUnresolved: a failure (ChildFailed) was followed within its
	// bound by neither a new start call of the child, nor the beginning of
	// the manager's shutdown, nor anything else that takes the child out of
	// supervision.
	FailureUnresolved Invariant = "failure-unresolved"
	// NotProbed: a running child made unhealthy (a webhook not ready) was
	// neither found unhealthy nor restarted within its bound.
	NotProbed Invariant = "unhealthy-not-noticed"
	// Stuck: a child stayed BackingOff, Stopping or Starting past its bound
	// with none of its calls running.
	Stuck Invariant = "stuck"
	// NotEnded: an escalation, or a lost lease with Exit, was not followed by
	// Done within its bound.
	NotEnded Invariant = "not-ended"
	// DoneWrong: Done, the final phase, Err, the events and Status disagree
	// about how the manager stopped, or Done never closed.
	DoneWrong Invariant = "done"
	// Books: Status, the events, the metrics and the children's own start
	// calls disagree on a child's restarts or failures.
	Books Invariant = "books"
	// GuardPassed: a controller's or store's lease guard (LeaseGuard of its
	// start context) passed when it must fail: after its incarnation's
	// Shutdown had returned, at a moment this replica did not hold the
	// lease (its shard's, with shards) by the fake API server's history, or
	// once the manager had stopped.
	GuardPassed Invariant = "guard-passed"
	// RenewableLost: the lease (a shard's, with shards) was lost although
	// this replica could renew it all along: no partition, no Steal and no
	// slow-API step had come before, and every Lease write was answered
	// within the retry period (Scenario.WriteLatency). A slow API server
	// must cost campaigns, never a lease held. Excused when the process
	// paused, or the replica sent no Lease write at all, for half the fence
	// budget: a replica that does not run cannot renew.
	RenewableLost Invariant = "renewable-lost"
	// RestartUncaused (trees): a child was restarted (ChildRestarted) with
	// no cause its groups' strategies allow since its previous restart: no
	// failure of it or of a group above it, no failure of a sibling (of
	// it or of a group above it) that its level's strategy takes it with
	// (AllForOne: any; RestForOne: one before it; at the root, never a
	// store's nor for a store), no RestartChild or StartChild of it or above
	// it, no change of leadership.
	RestartUncaused Invariant = "restart-uncaused"
	// StoppedGroupRan (trees): a child of a group stopped by ExhaustedStop
	// started after the group's ChildStopped, before any StartChild or
	// RestartChild of the group, above or in it.
	StoppedGroupRan Invariant = "stopped-group-ran"
	// StoppedRan: a child started after a StopChild or RemoveChild of it
	// (or of a group above it) had answered nil, with no StartChild or
	// RestartChild of it or above it sent since that stop was sent: a
	// removed or stopped child never runs again.
	StoppedRan Invariant = "stopped-ran"
	// RunningUnheld: with election on, the manager stayed Running while
	// holding neither the lease nor any shard (Status.Leader false) past
	// the fence timeout and ShutdownTimeout: a replica that holds nothing
	// is a standby, in Electing.
	RunningUnheld Invariant = "running-unheld"
	// FleetContextOverlap (fleets): the fleet built a member's subtree
	// again (a rotation, an engage after a disengage) while the Cluster of
	// an earlier build of it had not ended: "The old Cluster.Context() ends
	// first" (docs/fleet.md).
	FleetContextOverlap Invariant = "fleet-context-overlap"
	// DisengagedRan (fleets): a member's controller or store started
	// (its Run or Recover entered) after the fleet had published the
	// member's ClusterDisengaged, before it was engaged again.
	DisengagedRan Invariant = "disengaged-ran"
	// OfflineRan (fleets): a member's controller or store started while
	// its API server was down and after the fleet had said ClusterOffline,
	// with no StartChild or RestartChild of it or above it sent before the
	// ClusterOffline (one sent after is refused, or leaves the group as it
	// is).
	OfflineRan Invariant = "offline-ran"
	// OfflineLate (fleets): a member's API server stayed down for longer
	// than FailureThreshold, a probe period and its timeout, the StopChild
	// of its group and the longest backoff, plus the slack, while the
	// member was engaged, the manager Running, the member's shard (the
	// lease) held by this replica and the fleet's runner running, all
	// continuously, and the fleet's last word on the member was not
	// ClusterOffline or ClusterDisengaged: an outage the fleet never said
	// (docs/fleet.md, Offline). Excused when the process paused for longer
	// than half the slack.
	OfflineLate Invariant = "offline-late"
	// OnlineWhileDown (fleets): the fleet said a member ClusterOnline
	// while its API server had been down for longer than FailureThreshold,
	// two probe periods and a ProbeTimeout, plus the slack, with the
	// manager Running, the member's shard (the lease) held by this
	// replica and the fleet's runner running, all continuously up to that
	// moment (an engage of a new config meanwhile is no excuse: its first
	// probe decides at once): a verdict older than any probe
	// could give (docs/fleet.md, Offline: the outage is found within
	// FailureThreshold plus one probe period). Excused when the process
	// paused for longer than half the slack. The member's status turns
	// Online with that event; one that stays Online is OfflineLate's.
	OnlineWhileDown Invariant = "online-while-down"
	// OnlineEarly (fleets): the fleet said a member ClusterOnline while
	// one of its children (its controller, its store) was not running: no
	// incarnation of it whose start call had returned nil before the event
	// and whose Shutdown had not returned by then ("ClusterOnline: a member
	// cluster answers its probes and its subtree runs"). Excused by what
	// may leave a child of a running group not running, since the fleet's
	// previous word on the member: a StopChild, RemoveChild, RestartChild or
	// StartChild of it or above it sent (or answered) since; a failure of it
	// or of a group above it, or a start of it that failed (supervised from
	// then on); a change of leadership. Not judged where the member's
	// shard (the lease) is not held: such a replica says Online when the
	// member answers, its controllers running elsewhere (docs/fleet.md).
	// Excused too when the process paused for longer than half the slack.
	OnlineEarly Invariant = "online-early"
	// OutageUnsaid (fleets): a member's group stopped (its ChildStopped)
	// and started again (a ChildStarted or ChildRestarted of it or of
	// anything in it) with no ClusterOffline of the member between: the
	// fleet stops a member's group on its Offline verdict and says so
	// once the stop has been answered, before it starts it again
	// (docs/fleet.md). Excused by what else stops or starts a group: a
	// lifecycle call of it or above it sent since the fleet's previous word
	// on the member before the stop (or not yet answered then), its
	// removal (a rotation, a disengage), a failure of it (OnExhausted Stop:
	// said Failed, as a ClusterOffline) or a restart of a group above it
	// (its strategy) since that word, a new engage or a disengage between,
	// a change of leadership or of phase between.
	OutageUnsaid Invariant = "outage-unsaid"
	// MemberRunning (fleets): an incarnation of a member's controller or
	// store (a Recover still waiting for its API server too) had not ended
	// when the fleet said the member Offline or Disengaged (which it says
	// once its StopChild or RemoveChild of the group has been answered),
	// with no StartChild or RestartChild of it or above it sent within the
	// slack before.
	MemberRunning Invariant = "member-running"
	// ClusterNotEnded (fleets): a Cluster the fleet built had not ended
	// (its Context) within the slack after the manager stopped.
	ClusterNotEnded Invariant = "cluster-not-ended"
	// ClusterWritePassed (fleets): once a Cluster had ended, a write
	// through its Config did not fail with ErrClusterDisengaged, or reached
	// the member's API server.
	ClusterWritePassed Invariant = "cluster-write-passed"
	// SinceWrong: Status said a child entered its State (Since) before an
	// earlier Status saw it in another state: Since is not when it
	// entered State.
	SinceWrong Invariant = "since-wrong"
	// EscalationWrong (trees): an escalation named a child inside a group,
	// a group whose OnExhausted is Stop, or a group with a Kind other than
	// "group" (or a child that is not a group with Kind "group"); or it
	// escalated a restart's hung Shutdown inside a group whose OnExhausted
	// is Stop (which contains it); or its event and its EscalationError
	// disagree.
	EscalationWrong Invariant = "escalation-wrong"
	// Stranded: while the manager ran, a webhook (or, without election, a
	// controller or a store) stayed Stopped past the
	// longest backoff with no StopChild or RemoveChild of it or above it
	// and no group above it stopped, stopping or starting (a store's
	// Recover before it): nothing would start it again.
	Stranded Invariant = "stranded"
	// AnswerWrong: a lifecycle call answered nil disagrees with what its
	// children did. A StopChild or RemoveChild answers once the Shutdown
	// has returned: none of the incarnations of the child (every child, for
	// a group) whose start call had returned nil before the call was sent
	// may still be short of its Shutdown's return at the answer. A
	// RestartChild, StartChild or AddChild of a hosted child answers once
	// the start call has returned: one of its start calls began after the
	// call was sent and returned nil before the answer. (Not judged: a
	// group's RestartChild, StartChild or AddChild, which answers for many
	// children; an AddChild of a controller or store with election on,
	// which answers at once when its shard is not held.)
	AnswerWrong Invariant = "answer-wrong"
	// NotReelected: with Reelect, once every fault had healed (the network
	// back, the API server fast again, every hung call released, a stolen
	// Lease expired), a manager that was started, neither asked to stop
	// nor stopped, did not come back to Running holding every shard (the
	// single lease) within its bound: the lease free, nothing kept it from
	// taking it. The one replica of a sequence is the only candidate. A
	// manager that stopped by itself is excused only for an escalation
	// (EscalationError) or a fencing that did not complete in time
	// (ErrLeaseLost): any other end breaks it (a failed start after a
	// re-election, which the decider supervises, above all).
	NotReelected Invariant = "not-reelected"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant Invariant
	Child     string // empty for the manager
	Time      time.Time
	Detail    string
}

func (v Violation) String() string {
	who := v.Child
	if who == "" {
		who = "manager"
	}
	return fmt.Sprintf("[%s] %s: %s", v.Invariant, who, v.Detail)
}
