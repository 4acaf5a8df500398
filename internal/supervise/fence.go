package supervise

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/internal/elector"

	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/supervisor"
)

// fenceStage is where a fencing is, in this order.
type fenceStage uint8

const (
	fenceStopping fenceStage = iota // what the lease guarded is shutting down, the fence timeout running
	fenceDone                       // all of it has stopped, or the fence was overdue
)

var fenceStageNames = [...]string{"stopping", "done"}

func (st fenceStage) String() string { return fenceStageNames[st] }

// fenceMoves is every move of a fencing's stage: stopping, then done.
var fenceMoves = map[fenceStage][]fenceStage{fenceStopping: {fenceDone}, fenceDone: nil}

// become is the one way a fencing's stage moves (moveStage).
func (f *fencing) become(to fenceStage) { f.stage = moveStage("fencing", f.stage, to, fenceMoves) }

// fencing is the stop of what a lost lease (or shard) guarded, within the
// fence timeout: one shard's controllers, or the whole replica's
// controllers and stores. With Reelect a replica-wide fencing is a
// stand-down (standDown): the replica goes back to Electing and, once its
// children have stopped, campaigns again; the last shard's hand-over
// stands the replica down the same way, without a loss (no cause, no
// fence timeout). Without Reelect it ends the manager (exit).
type fencing struct {
	s     *root
	stage fenceStage
	cause error          // nil for the stand-down after the last shard was handed over
	recs  []*childRecord // the controllers and stores being stopped
	began time.Time
	timer clock.Timer // fenceOverdue at Config.FenceTimeout
	wait  *barrier
	shard int // the shard whose controllers it stops, or -1: the whole replica
	reply any // elector.Fenced, sent once stopped with Reelect: campaign for the shard again
	// releases are the hand-overs the stand-down carries out: the last
	// shard's, which stands the replica down, and any shard acquired and
	// asked back while it stands down (releaseStores), handed over once
	// the stores have stopped too, before the start round resumes.
	releases []*shardRelease
}

// fenceOverdue: a fencing's children have not all stopped within
// Config.FenceTimeout.
type fenceOverdue struct{ f *fencing }

// onShardLost fences what ran under the shard: its Lease may pass to
// another replica once the elector's fence budget has passed, so its
// controllers (and, with the last shard held, the stores) stop now. Once
// they have stopped the elector is told (elector.Fenced), with Reelect
// only, and campaigns for the shard again; the elector runs on.
func (s *root) onShardLost(m elector.Lost) {
	if !s.shards.valid(m.Shard) {
		return
	}
	reason := m.Reason
	if reason == "" {
		reason = "taken by another replica or not renewed in time"
	}
	s.lose(m.Shard, fmt.Errorf("%w: %s", lease.ErrLost, reason), elector.Fenced{Shard: m.Shard})
}

// lose records that this replica lost shard i (the single lease is shard 0)
// and fences what ran under it. reply, when not nil, lets the elector
// campaign for the shard again; it is sent once the shard's children have
// stopped, with Reelect only.
func (s *root) lose(i int, cause error, reply any) {
	fencing := s.shards.all[i].fencing
	wasHeld := s.shards.lose(i)
	if !wasHeld && fencing == nil && s.shards.sharded() {
		// Not held here, and nothing of it being fenced: handed over
		// already (the elector's deadline watcher gave it up before its
		// loop took the HandedOver in). Nothing runs under it, and there
		// is no loss to count: the elector may campaign for it again,
		// unless the manager is ending.
		if !s.ending() {
			s.tellElector(reply)
		}
		return
	}
	if s.shards.sharded() {
		s.obs.shardsLost.Add(1)
		cause = fmt.Errorf("shard %d (Lease %s): %w", i, s.shards.lease(i), cause)
		s.out.emit(supervisor.Event{Type: supervisor.ShardLost, Time: s.clock.now(), Phase: s.state.phase(), Shard: i, Err: cause})
	} else if wasHeld {
		s.out.emit(supervisor.Event{Type: supervisor.LeaderLost, Time: s.clock.now(), Phase: s.state.phase(), Err: lease.ErrLost})
	}
	switch {
	case s.ending():
		s.state.shutdown().lose(i, cause) // not campaigned for again
	case s.shards.leader:
		// Other shards are held: only this one's controllers stop.
		f, ctx := newFencing(s, cause, s.reg.scope(shardChild(i)), i)
		f.begin(ctx, reply)
	default:
		f, ctx := newFencing(s, cause, s.reg.scope(fencedChild), -1)
		f.begin(ctx, reply)
	}
}

// begin fences: f's children stop with Shutdown contexts (ctx) that end at
// three quarters of Config.FenceTimeout; at its end, any of them still
// shutting down fails the manager (overdue). Without Reelect the whole
// manager shuts down and fails with f's cause (exit). With it, a lost
// lease (or the last shard: every controller and store) stands the
// replica down to Electing and, once all have stopped, campaigns again;
// one shard lost while others are held stops that shard's controllers
// alone, the other shards' children and the stores running on. reply (the
// elector's Fenced, if any) is sent once they have stopped.
func (f *fencing) begin(ctx context.Context, reply any) {
	s := f.s
	if f.shard < 0 {
		s.cfg.Logger.Warn("lease lost: fencing", "children", len(f.recs), "timeout", s.cfg.fenceTimeout(), "reelect", s.cfg.Reelect)
	} else {
		s.shards.all[f.shard].fencing = f
		s.cfg.Logger.Warn("shard lost: fencing", "shard", f.shard, "children", len(f.recs), "timeout", s.cfg.fenceTimeout(), "reelect", s.cfg.Reelect)
	}
	if f.exit(ctx) {
		return
	}
	f.reply = reply
	if f.shard < 0 {
		f.standDown(ctx, nil)
		return
	}
	s.quiesce(shardChild(f.shard))
	if f.wait = s.stopAll(f, f.recs, ctx); f.wait == nil {
		f.stopped()
	}
}

// exit is a lost lease (or shard) without Reelect: the whole manager
// shuts down with f's cause, its children's Shutdown bounded by ctx, and f
// only sees its own children stop. It reports whether it did.
func (f *fencing) exit(ctx context.Context) bool {
	s := f.s
	if s.cfg.Reelect {
		return false
	}
	s.beginShutdown(f.cause, ctx)
	if f.wait = s.stopAll(f, f.recs, ctx); f.wait == nil {
		f.stopped()
	}
	return true
}

// lose bounds, by the fence timeout, the children of shard i (every
// fenced child, with one lease or the last shard) already shutting down
// when the lease is lost during a, a shutdown (nil: none): past it, any of
// them still active fails the manager (overdue), since it may run while
// another replica leads.
func (a *shutdownAttempt) lose(i int, cause error) {
	if a == nil {
		return
	}
	s := a.s
	if s.state.phase() != supervisor.PhaseShuttingDown {
		return
	}
	if !s.shards.sharded() {
		// It may have been waiting for Released; there is nothing left to release.
		a.finishIfStopped()
		if s.state.phase().Ended() {
			return
		}
	}
	scope, shard := fencedChild, -1
	if s.shards.sharded() && s.shards.leader {
		scope, shard = shardChild(i), i
	}
	active := s.reg.scope(func(rec *childRecord) bool { return scope(rec) && rec.state.Active() })
	if len(active) == 0 {
		return
	}
	f, _ := newFencing(s, cause, active, shard) // they are stopping with contexts of their own already
	s.shards.all[i].fencing = f
}

// newFencing starts the fencing of recs after cause (shard: the shard
// lost, -1 for the lease or every shard): their Shutdown contexts (ctx)
// end at three quarters of the fence timeout, and at its end overdue fails
// the manager if any of them is still active.
func newFencing(s *root, cause error, recs []*childRecord, shard int) (*fencing, context.Context) {
	timeout := s.cfg.fenceTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout*3/4)
	_ = cancel // released at the deadline; the children hold it until then
	f := &fencing{s: s, cause: cause, recs: recs, began: s.clock.now(), shard: shard}
	f.timer = s.cfg.Clock.AfterFunc(timeout, s.self.after(func() any { return fenceOverdue{f: f} }))
	return f, ctx
}

func (f *fencing) current(b *barrier) bool { return f.stage == fenceStopping && f.wait == b }
func (f *fencing) settled(*barrier, error) { f.stopped() }

// standDown takes the replica back to Electing, f's children stopping with
// ctx: after a lost lease (the last shard held) with Reelect, or once the
// last shard is to be handed over (release). A start in progress
// (Recovering, Starting) is abandoned, the Start call, if any, waiting for
// the next round; webhooks and plain runnables run on (a webhook's restart
// in progress goes on), and their liveness probes too, as on any standby.
// Once every controller and store has stopped, the elector may campaign
// again (f.reply), the shard waiting for it is handed over (release), and
// the next start round waits for the lease (stopped).
func (f *fencing) standDown(ctx context.Context, release *shardRelease) {
	s := f.s
	if release != nil {
		f.releases = append(f.releases, release)
	}
	round := s.state.round()
	if round != nil {
		round = newReelectionRound(s, round)
	}
	s.obs.starting.Store(false)
	s.obs.started.Store(false)
	s.become(electPhase{start: round, fence: f}, "standing down")
	s.quiesce(fencedChild)
	// A group's request still to start fenced children gives them up: the
	// next round starts them, and a request left owning them would start
	// them a second time beside it.
	s.requests.takeOut(fencedChild)
	if f.wait = s.stopAll(f, f.recs, ctx); f.wait == nil {
		f.stopped()
	}
}

// stopped: every child f stops has stopped. A shard's fencing lets the
// elector campaign for the shard again; a stand-down does too, hands the
// last shard over if that is why, and resumes the start round, unless the
// manager is ending (exit, or a shutdown that overtook it).
func (f *fencing) stopped() {
	s := f.s
	f.fenced()
	if f.shard >= 0 {
		if sh := s.shards.all[f.shard]; sh.fencing == f {
			sh.fencing = nil
		}
		if !s.ending() {
			s.tellElector(f.reply)
		}
		return
	}
	if !s.ending() {
		// Ending (exit, or a shutdown that overtook the stand-down): no
		// campaign again, as for a shard above; the lease is resigned once
		// every child has stopped. Before, the elector took this Fenced as
		// leave to campaign and won the lease back while shutting down.
		s.tellElector(f.reply)
	}
	for _, r := range f.releases {
		r.handOver()
	}
	st, ok := s.state.(electPhase)
	if !ok || st.fence != f {
		return // overtaken by a shutdown, or by the stand-down after it
	}
	round := st.start
	if round == nil {
		round = newReelectionRound(s, nil)
	}
	s.become(electPhase{start: round}, "stood down")
	round.step()
}

// fenced ends f: its children have stopped.
func (f *fencing) fenced() {
	if f.stage == fenceDone {
		return
	}
	f.become(fenceDone)
	f.wait = nil
	if f.timer != nil {
		f.timer.Stop()
	}
	if f.cause != nil {
		f.s.cfg.Logger.Warn("lease lost: fenced", "took", f.s.cfg.Clock.Since(f.began))
	}
}

// overdue fails the manager when a controller or store has not
// returned from Shutdown within Config.FenceTimeout after a lost lease: it
// may still be running while another replica takes the lease over. The
// manager stops at once, without waiting for it, so that Done tells the
// host to exit, the only fence left.
func (f *fencing) overdue() {
	s := f.s
	if f.stage == fenceDone || s.state.phase().Ended() {
		return
	}
	var stuck []string
	for _, rec := range f.recs {
		if rec.state.Active() {
			stuck = append(stuck, fmt.Sprintf("%s %q", rec.spec.Kind, rec.spec.Name))
		}
	}
	if len(stuck) == 0 {
		return
	}
	err := fmt.Errorf("%w; not fenced: %s did not return from Shutdown within %s, and may still run while another replica leads",
		f.cause, strings.Join(stuck, ", "), s.cfg.fenceTimeout())
	s.cfg.Logger.Error("lease lost: fencing incomplete, the process must exit", "err", err)
	f.become(fenceDone)
	s.beginShutdown(err, s.cfg.boundedContext()) // unless ending already
	a := s.state.shutdown()
	a.cause = err
	a.finish()
}

// fenceTimeout is FenceTimeout, or Timing.ShutdownTimeout without it.
func (c *Config) fenceTimeout() time.Duration {
	if c.FenceTimeout > 0 {
		return c.FenceTimeout
	}
	return c.Timing.ShutdownTimeout
}
