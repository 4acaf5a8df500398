package supervisor

import (
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
)

// The messages of package lease's own elector (lease.NewProps, client-go's
// LeaderElector), translated into the one election path of the shard
// elector's messages, shard 0 being the single lease. Its election ends
// with a loss: the elector is stopped at once and, with Reelect, a new one
// spawned once the loss is fenced. Delete this file once the single lease
// runs on the shard elector.

func (s *root) onLegacyLease(m any) {
	switch m := m.(type) {
	case lease.Elected:
		s.onShardAcquired(shard.Acquired{Shard: 0})
		s.holder = m.Identity
	case lease.NewLeader:
		s.onHolderChanged(shard.HolderChanged{Shard: 0, Identity: m.Identity})
	case lease.Lost:
		if s.elector != nil {
			s.ctx.Stop(s.elector) // its election has ended; a new one needs a new elector
			s.elector = nil
		}
		reason := m.Reason
		if reason == "" {
			reason = "not renewed within the renew deadline"
		}
		s.onShardLost(shard.Lost{Shard: 0, Reason: reason, Done: s.respawnElector})
	}
}

// respawnElector is a legacy loss's Done: campaign again with a new
// elector, unless the round that resumes after the stand-down spawned one.
func (s *root) respawnElector() {
	if s.elector == nil && s.shutdown == nil && !s.phase.Ended() {
		s.elector = s.ctx.SpawnPrefix(s.cfg.Elector, "elector")
	}
}
