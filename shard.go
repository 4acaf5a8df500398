package controllermanager

import (
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"strings"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/supervise"
)

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
// pinned to ShardOf(its name, Shards); one inside a group (NewGroup) to
// ShardOf(its path, "<group>/<name>", Shards), whether added before Start
// or by AddChild; one under a group of AddShardedGroup to that group's
// shard. So users can predict and test
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

// shardCount is the number of shards of m's leadership: 1 with the single
// lease or election off.
func (m *BaseManager) shardCount() int {
	if m.election == nil || m.election.shards < 1 {
		return 1
	}
	return m.election.shards
}

// pinned is a controller of AddSharded: named and pinned to its shard by the
// manager, whatever its own name.
type pinned struct {
	name  string
	shard int
	c     Controller
}

// AddSharded adds one controller per shard for a controller whose keys are
// split: with LeaderElectionSpec.Shards = S it calls build(Shard{i, S}) for
// i = 0…S-1 and adds the result as the controller "<name>-<i>", pinned to
// shard i, so that it runs on whichever replica holds shard i's Lease. Each
// skips the keys its shard does not own (Shard.Owns). With a single lease or
// election off, S is 1: one controller "<name>-0" with Shard{0, 1}, which
// owns every key.
//
// Like Add, it has no effect after Start and cannot fail: build panicking or
// returning nil makes Start fail with an error naming the child, and a name
// that is not a valid child name (empty, blank, with a "/") makes it fail
// with an error wrapping ErrInvalidName.
func (m *ControllerManager) AddSharded(name string, build func(Shard) Controller) {
	n := m.shardCount()
	vals := make([]any, n)
	if strings.TrimSpace(name) == "" { // the shards' own names ("-0") would pass; any other invalid name is named by its shards'
		err := supervise.CheckName(name, actors.KindController, "")
		m.add([]any{supervise.Invalid{Err: fmt.Errorf("AddSharded: %w", err)}})
		return
	}
	for i := range n {
		child := fmt.Sprintf("%s-%d", name, i)
		c, err := buildShard(build, Shard{Index: i, Count: n})
		switch {
		case err != nil:
			vals[i] = shardBuildError{name: child, err: err}
		case c == nil:
			vals[i] = shardBuildError{name: child, err: errors.New("build returned a nil Controller")}
		default:
			vals[i] = pinned{name: child, shard: i, c: c}
		}
	}
	m.add(vals)
}

// AddShardedGroup is AddSharded with a group as each shard's unit: with
// LeaderElectionSpec.Shards = S it calls build(Shard{i, S}) for i =
// 0…S-1 and adds the group "<name>-<i>" (NewGroup(…, spec, children...))
// whose controllers, at any depth, are pinned to shard i: they run only
// on the replica that holds shard i's Lease, and stop when it is lost.
// Its stores and webhooks follow the root's rule (stores run while this
// replica holds at least one shard; webhooks always), so a group's store
// is a cache its shard's controllers read, not fenced by that shard alone.
// With a single lease or election off, S is 1: one group "<name>-0".
//
// Like AddSharded it has no effect after Start and cannot fail: build
// panicking or returning no children makes Start fail naming the group,
// and an invalid name makes it fail with an error wrapping ErrInvalidName.
func (m *ControllerManager) AddShardedGroup(name string, spec SupervisionSpec, build func(Shard) []Runnable) {
	n := m.shardCount()
	vals := make([]any, n)
	if strings.TrimSpace(name) == "" { // the shards' own names ("-0") would pass; any other invalid name is named by its shards'
		err := supervise.CheckName(name, actors.KindGroup, "")
		m.add([]any{supervise.Invalid{Err: fmt.Errorf("AddShardedGroup: %w", err)}})
		return
	}
	for i := range n {
		group := fmt.Sprintf("%s-%d", name, i)
		children, err := buildShardGroup(build, Shard{Index: i, Count: n})
		switch {
		case err != nil:
			vals[i] = shardBuildError{name: group, err: err, group: true}
		case len(children) == 0:
			vals[i] = shardBuildError{name: group, err: errors.New("build returned no children"), group: true}
		default:
			g := NewGroup(group, spec, children...)
			g.shard = i + 1
			vals[i] = g
		}
	}
	m.add(vals)
}

func buildShardGroup(build func(Shard) []Runnable, s Shard) (children []Runnable, err error) {
	if build == nil {
		return nil, errors.New("AddShardedGroup: build is nil")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("build panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return build(s), nil
}

// shardBuildError is an AddSharded child that could not be built; Start
// fails naming it.
type shardBuildError struct {
	name  string
	err   error
	group bool // of AddShardedGroup
}

func buildShard(build func(Shard) Controller, s Shard) (c Controller, err error) {
	if build == nil {
		return nil, errors.New("AddSharded: build is nil")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("build panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return build(s), nil
}

// specs classifies, names and validates what was added (supervisor.Specs),
// AddSharded's controllers as they were named and pinned, and pins every
// other controller to ShardOf(its name, S).
func (m *BaseManager) specs(added []any) ([]childactor.Spec, error) {
	shards := m.shardCount()
	vals := make([]any, len(added))
	for i, v := range added {
		switch p := v.(type) {
		case pinned:
			vals[i] = childactor.Spec{Name: p.name, Kind: actors.KindController, Impl: p.c, Shard: p.shard}
		case shardBuildError:
			if p.group {
				vals[i] = supervise.Invalid{Err: fmt.Errorf("group %q of AddShardedGroup: %w", p.name, p.err)}
				continue
			}
			vals[i] = supervise.Invalid{Err: fmt.Errorf("controller %q of AddSharded: %w", p.name, p.err)}
		default:
			vals[i] = v
		}
	}
	if err := m.bindFleets(vals); err != nil {
		return nil, err
	}
	grouped := flattenGroups(vals)
	specs, err := supervise.Specs(m.mode, grouped, m.timing.HealthTimeout)
	if err != nil {
		return nil, err
	}
	for i := range specs {
		if specs[i].Kind != actors.KindController {
			continue
		}
		switch v := grouped[i].(type) {
		case childactor.Spec: // AddSharded's, pinned already
		case supervise.InGroup:
			if v.Shard > 0 { // in a group of AddShardedGroup
				specs[i].Shard = v.Shard - 1
				continue
			}
			specs[i].Shard = ShardOf(specs[i].Name, shards)
		default:
			specs[i].Shard = ShardOf(specs[i].Name, shards)
		}
	}
	return specs, nil
}
