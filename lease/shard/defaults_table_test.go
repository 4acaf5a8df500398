package shard_test

import (
	"testing"

	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/lease/shard"
)

// docs/defaults.md lists internal/defaults; DefaultMaxCampaigns is listed
// there as MaxCampaigns, and must be the value listed.
func TestDefaultMaxCampaignsIsTheTables(t *testing.T) {
	if shard.DefaultMaxCampaigns != defaults.MaxCampaigns {
		t.Errorf("shard.DefaultMaxCampaigns = %d, docs/defaults.md (internal/defaults.MaxCampaigns) says %d", shard.DefaultMaxCampaigns, defaults.MaxCampaigns)
	}
}
