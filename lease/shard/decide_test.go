package shard

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDecide is decide's table: what reconcile does with each shard, from
// what the loop observed and holds, sharded and with the single lease
// (shard 0 always assigned to self while not stopping).
func TestDecide(t *testing.T) {
	const self = "a"
	tests := []struct {
		name     string
		stopping bool
		limit    int
		shards   []shardView
		want     []decision
	}{
		{name: "free shard assigned to self: campaign", limit: 4,
			shards: []shardView{{assigned: self}}, want: []decision{campaignFor}},
		{name: "assigned to self but held live by another: wait for its hand-back", limit: 4,
			shards: []shardView{{assigned: self, heldElsewhere: true}}, want: []decision{keep}},
		{name: "held, assigned to another: hand back once", limit: 4,
			shards: []shardView{{assigned: "b", held: true}, {assigned: "b", held: true, releasing: true}}, want: []decision{handBack, keep}},
		{name: "fencing or campaigning already: nothing", limit: 4,
			shards: []shardView{{assigned: self, fencing: true}, {assigned: self, campaigning: true}}, want: []decision{keep, keep}},
		{name: "the limit counts campaigns in flight, in shard order", limit: 2,
			shards: []shardView{{assigned: self, campaigning: true}, {assigned: self}, {assigned: self}}, want: []decision{keep, campaignFor, keep}},
		{name: "a shard held elsewhere takes no slot of the limit", limit: 1,
			shards: []shardView{{assigned: self, heldElsewhere: true}, {assigned: self}}, want: []decision{keep, campaignFor}},
		{name: "stopping: every held shard handed back, nothing campaigned for", stopping: true, limit: 4,
			shards: []shardView{{assigned: "", held: true}, {assigned: ""}}, want: []decision{handBack, keep}},

		{name: "single lease released (empty holder): campaign at once", limit: 16,
			shards: []shardView{{assigned: self}}, want: []decision{campaignFor}},
		{name: "single lease held by a live other replica (any release): wait", limit: 16,
			shards: []shardView{{assigned: self, heldElsewhere: true}}, want: []decision{keep}},
		{name: "single lease held: keep renewing", limit: 16,
			shards: []shardView{{assigned: self, held: true}}, want: []decision{keep}},
		{name: "single lease lost: not campaigned for until fenced", limit: 16,
			shards: []shardView{{assigned: self, fencing: true}}, want: []decision{keep}},
		{name: "single lease on a stop: handed back", stopping: true, limit: 16,
			shards: []shardView{{assigned: "", held: true}}, want: []decision{handBack}},
		{name: "single lease on a stop, being released: nothing more", stopping: true, limit: 16,
			shards: []shardView{{assigned: "", held: true, releasing: true}}, want: []decision{keep}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, decide(self, tt.stopping, tt.limit, tt.shards))
		})
	}
}
