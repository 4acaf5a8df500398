// Package lease holds what leader election shares with the code that users
// write and read: the sentinel errors (ErrLost, ErrNotHeld with its
// *NotHeldError, ErrRenewalOverdue), the Term of a hold that the lease
// guards read, the Watchdog liveness check, the Lease lock constructors and
// NewIdentity. Its test server is package lease/leasetest.
//
// The manager's elector, for the single lease and for shards alike, is
// package lease/shard's Elector (the single lease is its shard 0, in its
// single-lease mode), on client-go's Lease record and safety rules. The
// safety model, made explicit:
//
//   - Nothing the lease guards starts before this replica has acquired the
//     lease, and a decision to write the Lease reads it first: a watch makes
//     a decision faster, never safe.
//   - A holder that could not renew for RenewDeadline considers the lease
//     lost. Another replica may acquire it LeaseDuration after it observed
//     the last renewal; the fence budget, LeaseDuration − RenewDeadline −
//     RetryPeriod, is the time in between, and the supervisor stops every
//     controller within four fifths of it.
//   - The lease is released only once every runnable it guards has returned
//     from Shutdown.
//   - The Watchdog reports a leader whose renewals have stopped without its
//     elector noticing, for a liveness probe to restart the process.
//   - A Term fences at the write, where the rest cannot: a paused leader
//     wakes with its workers running before its elector notices. Its checks
//     pass only before the send time of the last successful renewal plus the
//     recorded lease duration less a margin, and fail for ever once the hold
//     has ended.
//
// What it cannot guarantee (clock-rate skew, a request already on the wire
// when the process paused, a Shutdown that ignores its context) is set out
// in docs/leader-election.md.
package lease
