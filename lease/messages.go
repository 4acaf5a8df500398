package lease

import "errors"

// ErrLost is the cause of a manager stopped because it lost its lease:
// errors.Is(manager.Err(), lease.ErrLost) tells the host why it stopped.
var ErrLost = errors.New("lease: lost")

// Elected is sent to the parent when this replica has acquired the lease.
type Elected struct {
	Identity string // this replica's identity
}

// NewLeader is sent to the parent each time it observes a different holder of
// the lease, this replica included.
type NewLeader struct {
	Identity string
}

// Lost is sent to the parent when this replica, having led, failed to renew
// the lease within the renew deadline. Another replica may acquire it once
// the lease duration has passed since the last renewal.
type Lost struct {
	Identity string
}

// Resign is sent by the parent to give the lease up: the elector stops
// renewing and, if it holds the lease, releases it, then answers Released.
type Resign struct{}

// Released is sent to the parent once the elector has stopped after Resign;
// the lease is no longer held by this replica.
type Released struct{}
