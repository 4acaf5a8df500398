package lease

import "errors"

// ErrLost is the cause of a manager stopped because it lost its lease:
// errors.Is(manager.Err(), lease.ErrLost) tells the host why it stopped.
var ErrLost = errors.New("lease: lost")

// Elected is sent to the parent when this replica has acquired the lease.
// Nothing that the lease guards may run before it.
type Elected struct {
	Identity string // this replica's identity
}

// NewLeader is sent to the parent each time the elector observes a
// different holder of the lease, this replica included; Identity is empty
// when the lease has been released and nobody holds it.
type NewLeader struct {
	Identity string
}

// Lost is sent to the parent, at most once and only after Elected, when this
// replica can no longer count on the lease: a renewal has failed for the
// renew deadline, or renewals have stalled past it. Another replica may
// acquire the lease once FenceBudget has passed: the parent must stop
// everything the lease guards before then. The elector's election is over;
// the parent stops it, and spawns a new one to campaign again.
type Lost struct {
	Identity string
	// Reason says why, with the figures, in the words the elector also
	// logs: "not renewed for more than 2.75s (renew deadline 2s + 1.5 ×
	// retry period 500ms)".
	Reason string
}

// Resign is sent by the parent, once nothing the lease guards runs any more,
// to give the lease up: the elector stops campaigning or renewing and, if
// this replica still holds the lease, releases it; then it answers Released.
type Resign struct{}

// Released is sent to the parent once the elector has stopped after Resign;
// the lease is not held by this replica any more (released, or it was never
// held, or it was lost meanwhile).
type Released struct{}
