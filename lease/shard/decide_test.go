package shard

import (
	"testing"
	"time"

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

// A campaign costs the rate limiter a read and a write: the campaigns in
// flight, with a renewal per held shard and the member Lease's, fit in
// what the limiter lets through in a retry period; one at least.
func TestCampaignsWithinTheRateLimit(t *testing.T) {
	for _, tc := range []struct {
		qps    float64
		period time.Duration
		held   int
		want   int
	}{
		{5, 2 * time.Second, 0, 4},    // 10 requests: the member Lease's renewal, 4 campaigns of 2
		{5, 2 * time.Second, 4, 2},    // 10 - 4 renewals - 1 = 5: 2 campaigns
		{5, 2 * time.Second, 9, 1},    // nothing left: one at least
		{5, 2 * time.Second, 30, 1},   // more held than the limiter lets through: one at least
		{50, 2 * time.Second, 10, 44}, // 100 - 10 - 1 = 89: 44 campaigns
	} {
		got := campaignsWithin(tc.qps, tc.period, tc.held)
		if got != tc.want {
			t.Errorf("campaignsWithin(%v, %s, %d) = %d, want %d", tc.qps, tc.period, tc.held, got, tc.want)
		}
		requests, allowed := tc.held+1+got*campaignRequests, int(tc.qps*tc.period.Seconds())
		if got > 1 && requests > allowed {
			t.Errorf("campaignsWithin(%v, %s, %d) = %d: %d requests in a period that lets %d through", tc.qps, tc.period, tc.held, got, requests, allowed)
		}
	}
}
