// Package shard is sharded leadership over coordination.k8s.io/v1 Leases:
// S shard Leases "<name>-<i>", one member Lease per replica, the rule that
// says which replica should hold which shard (Assign), and an Elector that
// watches all of them with one watch and acquires, renews and releases the
// shard Leases this replica is assigned.
//
// # Leases
//
// Every Lease of a group carries the label LabelGroup = <name>, so that one
// watch with one label selector sees them all; LabelRole says "shard" or
// "member". A shard Lease's holder is the replica running that shard's
// children. A member Lease "<name>-member-<h>" (h: 16 hex digits of FNV-1a
// 64 of the identity) is held and renewed by its replica for as long as it
// runs: it is how a replica that holds no shard yet (one that just joined)
// is seen by the others. The shard Leases' holders alone cannot say that, so
// a joiner would never be given a shard.
//
// # Safety
//
// The Elector keeps client-go's rules: every write is an update carrying the
// resourceVersion last read (optimistic concurrency: a replica that lost a
// race gets 409 Conflict and writes nothing); a Lease held by another
// replica is taken over only once LeaseDuration has passed on this replica's
// clock since it last saw the Lease change (the local-observation clock:
// the holder's renewTime and acquireTime are written, never trusted); a
// holder that could not renew for RenewDeadline considers the shard lost.
// See docs/leader-election.md, "Sharded leadership".
//
// # The loop
//
// One goroutine owns the Elector's state and never waits on the API
// server: each Lease write (a campaign, a renewal, a release, the member
// Lease's) runs on a goroutine of its own, bounded by the shard's renew
// deadline, and its answer comes back as a message. So a renewal never
// waits behind a campaign, campaigns go out side by side (at most
// Config.MaxCampaigns, and within the Lease client's rate limit), and a
// slow API server costs a held shard only when it cannot answer one write
// within RenewDeadline − RetryPeriod. What to hand back and what to
// campaign for is decide's pure function of what the loop observed and
// holds.
package shard
