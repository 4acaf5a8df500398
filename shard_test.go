package controllermanager

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// TestShardOfGolden pins ShardOf forever: users predict placement from it,
// and replicas of different versions must agree. Never change a want.
func TestShardOfGolden(t *testing.T) {
	for _, tc := range []struct {
		key   string
		count int
		want  int
	}{
		// FNV-1a 64 of "" is the offset basis 0xcbf29ce484222325.
		{"", 12, int(uint64(0xcbf29ce484222325) % 12)},
		{"", 1, 0},
		{"a", 0, 0},
		{"a", -3, 0},
		// FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
		{"a", 4, int(uint64(0xaf63dc4c8601ec8c) % 4)},
		{"a", 12, int(uint64(0xaf63dc4c8601ec8c) % 12)},
		{"a", 32, int(uint64(0xaf63dc4c8601ec8c) % 32)},
		// Literal values, computed once with hash/fnv and kept.
		{"foobar", 1 << 20, int(uint64(0x85944171f73967e8) % (1 << 20))},
		{"foobar", 12, 0}, // FNV-1a 64 of "foobar" is 0x85944171f73967e8, the published test vector.
		{"deployments", 12, 7},
		{"deployments", 32, 23},
		{"tenant-42", 4, 2},
		{"tenant-42", 256, 226},
		{"ns/name", 7, 0},
	} {
		assert.Equal(t, tc.want, ShardOf(tc.key, tc.count), "ShardOf(%q, %d)", tc.key, tc.count)
	}
}

func TestShardOwnsSplitsEveryKeyOnce(t *testing.T) {
	for _, count := range []int{1, 4, 12, 32} {
		perShard := make([]int, count)
		for k := range 4000 {
			key := fmt.Sprintf("key-%d", k)
			owners := 0
			for i := range count {
				if (Shard{Index: i, Count: count}).Owns(key) {
					owners++
					perShard[i]++
				}
			}
			assert.Equal(t, 1, owners, "key %q with %d shards", key, count)
		}
		// A hash that spreads keys: no shard gets less than half its share.
		for i, n := range perShard {
			assert.Greater(t, n, 4000/count/2, "shard %d of %d", i, count)
		}
	}
}

func TestLeaderElectionSpecShards(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name      string
		leaseName string
		shards    int32
		want      int
		err       string
	}{
		{name: "unset is the single lease", leaseName: "lead", shards: 0, want: 1},
		{name: "one is the single lease", leaseName: "lead", shards: 1, want: 1},
		{name: "twelve", leaseName: "lead", shards: 12, want: 12},
		{name: "the maximum", leaseName: "lead", shards: MaxShards, want: MaxShards},
		{name: "negative", leaseName: "lead", shards: -1, err: "leaderElection.shards: must be between 1 and 256 (each shard is a Lease renewed every retry period), got -1"},
		{name: "past the maximum", leaseName: "lead", shards: MaxShards + 1, err: "leaderElection.shards: must be between 1 and 256"},
		{name: "shard names too long", leaseName: strings.Repeat("a", 252), shards: 12,
			err: `leaderElection.shards: shard lease name "` + strings.Repeat("a", 252) + `-11" is not a valid Kubernetes name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &LeaderElectionSpec{Enabled: &yes, LeaseName: tc.leaseName, LeaseNamespace: "ns", Shards: tc.shards}
			c, err := spec.election("")
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.shards)
		})
	}
}

func TestShardsNeedAClientset(t *testing.T) {
	yes := true
	spec := ControllerManagerConfigSpec{LeaderElection: &LeaderElectionSpec{Enabled: &yes, LeaseName: "lead", LeaseNamespace: "ns", Shards: 12}}
	lock, err := lease.NewLeaseLock(leasetest.NewServer().Client("a"), "ns", "lead", "a")
	require.NoError(t, err)
	m, err := NewControllerManager(NewContext(nil), spec, "", WithLeaseLock(lock))
	require.Error(t, err)
	assert.Nil(t, m)
	assert.Contains(t, err.Error(), "leaderElection.shards: 12 shards need a clientset to watch their Leases")
}

func TestAddShardedNamesAndPinsItsControllers(t *testing.T) {
	yes := true
	spec := ControllerManagerConfigSpec{LeaderElection: &LeaderElectionSpec{Enabled: &yes, LeaseName: "lead", LeaseNamespace: "ns", Shards: 4}}
	m, err := NewControllerManager(NewContext(leasetest.NewServer().Client("a")), spec, "")
	require.NoError(t, err)
	var built []Shard
	m.AddSharded("ctl", func(s Shard) Controller {
		built = append(built, s)
		if s.Index == 2 {
			panic("no shard 2 today")
		}
		return nil
	})
	assert.Equal(t, []Shard{{0, 4}, {1, 4}, {2, 4}, {3, 4}}, built)
	err = m.Start(context.Background(), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `controller "ctl-0" of AddSharded: build returned a nil Controller`)
	assert.Contains(t, err.Error(), `controller "ctl-2" of AddSharded: build panicked: no shard 2 today`)
}
