package supervise

import (
	"github.com/actorkube/controllermanager/internal/elector"
	"github.com/actorkube/controllermanager/supervisor"
)

// releaseStage is where a shard's hand-over is, in this order.
type releaseStage uint8

const (
	releaseControllers   releaseStage = iota // the shard's controllers are shutting down
	releaseStores                            // the last shard held: the stores stop too (a stand-down, outside a shutdown)
	releaseAfterShutdown                     // the last shard of a shutdown: waiting for every child to stop
	releaseDone                              // handed over (Done called)
)

var releaseStageNames = [...]string{"controllers", "stores", "after shutdown", "done"}

func (st releaseStage) String() string { return releaseStageNames[st] }

// releaseMoves is every move of a hand-over's stage: the controllers
// stopped, then the stores, or (the last shard of a shutdown) after the
// shutdown; done from any (handed over).
var releaseMoves = map[releaseStage][]releaseStage{
	releaseControllers:   {releaseStores, releaseAfterShutdown, releaseDone},
	releaseStores:        {releaseDone},
	releaseAfterShutdown: {releaseDone},
	releaseDone:          nil,
}

// become is the one way a hand-over's stage moves (moveStage).
func (r *shardRelease) become(to releaseStage) {
	r.stage = moveStage("shard hand-over", r.stage, to, releaseMoves)
}

// shardRelease hands a shard over to another replica once nothing of it
// runs here: the elector renews its Lease until done. The last shard held
// is handed over only once the stores have stopped too: they run under the
// union of the shards, so that a replica holding none runs nothing fenced.
// Outside a shutdown that is a stand-down to Electing.
type shardRelease struct {
	s     *root
	i     int
	stage releaseStage
	wait  *barrier
}

// onShardReleasing begins the hand-over of shard m.Shard.
func (s *root) onShardReleasing(m elector.Releasing) {
	if !s.shards.valid(m.Shard) {
		s.tellElector(elector.HandedOver{Shard: m.Shard})
		return
	}
	sh := s.shards.all[m.Shard]
	if !sh.held {
		s.tellElector(elector.HandedOver{Shard: m.Shard}) // lost meanwhile and fenced: nothing of it runs
		return
	}
	r := &shardRelease{s: s, i: m.Shard}
	sh.release = r
	s.quiesce(shardChild(r.i))
	s.cfg.Logger.Info("shard moving to another replica: stopping its controllers", "shard", r.i)
	r.step()
}

// step runs the hand-over from its stage on until it must wait.
func (r *shardRelease) step() {
	s := r.s
	for {
		switch r.stage {
		case releaseControllers:
			if r.wait = s.stopAll(r, s.reg.scope(shardChild(r.i)), s.cfg.boundedContext()); r.wait != nil {
				return
			}
			switch a := s.state.shutdown(); {
			case s.shards.all[r.i].release != r || s.shards.holdsOtherThan(r.i):
				r.handOver()
				return
			case a != nil && a.stage == shutdownStopping:
				// The last shard of a shutdown goes once every child has
				// stopped (releaseLease), as the single lease does; never,
				// if one does not stop.
				r.become(releaseAfterShutdown)
				a.lastShard = append(a.lastShard, r)
				return
			case a != nil:
				r.handOver() // every child has stopped already
				return
			}
		case releaseStores:
			switch s.state.phase() {
			case supervisor.PhaseRecovering, supervisor.PhaseStarting, supervisor.PhaseRunning: // no shutdown, no stand-down
				f := &fencing{s: s, recs: s.reg.scope(fencedChild), shard: -1} // no loss: no fence timeout
				f.standDown(s.cfg.boundedContext(), r)
				return
			case supervisor.PhaseElecting:
				if f := s.state.standingDown(); f != nil && f.stage == fenceStopping {
					// A shard acquired and asked back while the replica
					// stands down: the stand-down stops the same children,
					// and hands the shard over before it resumes the start
					// round. Waiting beside it, the round could resume with
					// the shard still counted held and run the stores with
					// no shard left once it went.
					f.releases = append(f.releases, r)
					return
				}
			}
			if r.wait = s.stopAll(r, s.reg.scope(fencedChild), s.cfg.boundedContext()); r.wait != nil {
				return
			}
			r.handOver()
			return
		case releaseAfterShutdown, releaseDone:
			return
		}
		r.become(r.stage + 1)
	}
}

func (r *shardRelease) current(b *barrier) bool { return r.stage != releaseDone && r.wait == b }

// settled: the controllers have stopped (the hand-over goes on), or the
// stores have (the shard goes).
func (r *shardRelease) settled(*barrier, error) {
	r.wait = nil
	if r.stage == releaseStores {
		r.handOver()
		return
	}
	r.step()
}

// handOver ends the hand-over: the shard is released, unless it was lost
// while its children stopped (the loss fenced it), and the elector told.
func (r *shardRelease) handOver() {
	if r.stage == releaseDone {
		return
	}
	s, sh := r.s, r.s.shards.all[r.i]
	r.become(releaseDone)
	r.wait = nil
	if sh.release == r { // else lost while stopping: the loss fenced it
		sh.release = nil
		s.shards.set(r.i, false)
		if s.shards.sharded() { // the single lease's hand-over is its release: LeaderLost says nothing of it
			s.obs.shardsReleased.Add(1)
			s.out.emit(supervisor.Event{Type: supervisor.ShardReleased, Time: s.clock.now(), Phase: s.state.phase(), Shard: r.i})
		}
	}
	s.tellElector(elector.HandedOver{Shard: r.i}) // hand the Lease over
}
