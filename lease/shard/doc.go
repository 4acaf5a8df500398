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
// children. A member Lease (MemberLease) is held and renewed by its replica
// for as long as it runs, so that a replica that holds no shard yet (one
// that just joined) is seen, and given some.
//
// # Safety
//
// The Elector keeps client-go's rules: optimistic writes carrying the
// resourceVersion last read, takeover only LeaseDuration after this
// replica last saw the Lease change (the local-observation clock), and a
// holder that could not renew for RenewDeadline considers the shard lost.
// See docs/leader-election.md, "Sharded leadership".
//
// # The loop
//
// One goroutine owns the Elector's state and never waits on the API
// server: each Lease write runs on a goroutine of its own, bounded by the
// shard's renew deadline, and its answer comes back as a message
// (docs/leader-election.md, "The bound: how slow an API server a sharded
// replica survives"). What to hand back and what to campaign for is
// decide's pure function of what the loop observed and holds.
package shard
