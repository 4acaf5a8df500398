package controllermanager

import "hash/fnv"

// MaxShards is the most shard Leases LeaderElectionSpec.Shards may ask for.
//
// Every shard is a Lease that its holder renews once per RetryPeriod, so the
// replicas together write S Leases per RetryPeriod whatever their number:
// 256 shards at the default 5s retry period are about 51 writes a second,
// the load of some 500 kubelets' node heartbeats, which is as far as one
// manager's leadership should be allowed to weigh on an API server. Past a
// few dozen shards, finer placement is better done inside a controller
// (AddSharded and Shard.Owns split its keys, not its Leases).
const MaxShards = 256

// Shard is one of Count parts of the keys a controller handles: the keys k
// with ShardOf(k, Count) == Index. AddSharded builds one controller per
// shard with it.
type Shard struct {
	Index int // 0 ≤ Index < Count
	Count int // the number of shards, LeaderElectionSpec.Shards
}

// Owns reports whether key belongs to the shard: ShardOf(key, s.Count) ==
// s.Index. A sharded controller skips the keys its shard does not own.
func (s Shard) Owns(key string) bool { return ShardOf(key, s.Count) == s.Index }

// ShardOf returns the shard of key among count shards, the same on every
// replica and in every version of this package:
//
//	FNV-1a 64 (hash/fnv.New64a) of the key's bytes, as an unsigned 64-bit
//	integer, modulo count.
//
// With count < 2 it is 0. A controller added with ControllerManager.Add is
// pinned to ShardOf(its name, Shards), so that users can predict and test
// where their controllers run, and reimplement the function elsewhere (a
// script, another language) from the line above.
func ShardOf(key string, count int) int {
	if count < 2 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key)) // a hash.Hash never fails to write
	return int(h.Sum64() % uint64(count))
}
