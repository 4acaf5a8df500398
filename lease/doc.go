// Package lease holds what leader election shares: the Lease lock
// constructors, the Resign and Released messages, the Fence, Term and
// Watchdog of the lease guards, and the sentinel errors. The manager's
// elector, for the single lease and for shards alike, is package
// lease/shard's watch-driven Elector (the single lease is its shard 0, in
// its single-lease mode), on client-go's Lease record and safety rules.
//
// NewProps is the previous release's elector, kept for compatibility and
// unused by the manager: an actor that wraps
// k8s.io/client-go/tools/leaderelection over a resourcelock.Interface (a
// coordination.k8s.io/v1 LeaseLock by default) and tells its parent, the
// root supervisor, what happens as messages: Elected, NewLeader, Lost and,
// once it has given the lease up on request, Released. What follows is its
// safety model, which the new elector keeps.
//
// The elector never decides what runs: the supervisor does. The safety model
// is client-go's, made explicit:
//
//   - Nothing the lease guards starts before Elected.
//   - Lost comes at most RetryPeriod + RenewDeadline after the last
//     successful renewal (client-go gives up then; should its renew loop be
//     stuck, the elector gives up by itself half a retry period later).
//     Another replica may acquire the lease LeaseDuration after it observed
//     that renewal. Config.FenceBudget is the time in between, and the
//     supervisor stops every controller within Config.FenceTimeout of Lost.
//   - The lease is released only on Resign, which the supervisor sends after
//     every runnable has returned from Shutdown. client-go's ReleaseOnCancel
//     is off, because it would also release a lease whose renewal failed,
//     before anything was fenced.
//   - The Watchdog reports a leader whose renewals have stopped without its
//     election noticing, for a liveness probe to restart the process.
//   - The Fence fences at the write, where the rest cannot: a paused leader
//     wakes with its workers running before its elector notices. Every
//     successful renewal's send time (monotonic, read before the request is
//     sent) is published to it; a check passes only before that time plus
//     the recorded lease duration less Config.ClockSkewMargin, and fails
//     for ever once the election has ended.
//
// What it cannot guarantee (clock-rate skew, a request already on the wire
// when the process paused, a Shutdown that ignores its context) is set out
// in docs/leader-election.md.
package lease
