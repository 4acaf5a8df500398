package lease

import "errors"

// ErrLost is the cause of a manager stopped because it lost its lease:
// errors.Is(manager.Err(), lease.ErrLost) tells the host why it stopped.
var ErrLost = errors.New("lease: lost")
