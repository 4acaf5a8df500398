package supervise

import (
	"context"

	"github.com/actorkube/controllermanager/supervisor"
)

// standStage is where a stand-down is, in this order.
type standStage uint8

const (
	standStopping standStage = iota // every controller and store is shutting down; Electing
	standDone                       // all have stopped: the replica campaigns again
)

var standStageNames = [...]string{"stopping", "done"}

func (st standStage) String() string { return standStageNames[st] }

// standMoves is every move of a stand-down's stage: stopping, then done.
var standMoves = map[standStage][]standStage{standStopping: {standDone}, standDone: nil}

// become is the one way a stand-down's stage moves (moveStage).
func (d *standDown) become(to standStage) { d.stage = moveStage("stand-down", d.stage, to, standMoves) }

// standDown takes the replica back to Electing, after a lost lease (the
// last shard held) with Reelect, or once the last shard is to be handed
// over: a start in progress (Recovering, Starting) is abandoned, the Start
// call, if any, waiting for the next round; webhooks and plain runnables
// run on (a webhook's restart in progress goes on), and their liveness
// probes too, as on any standby. Once every controller and store has
// stopped, the fencing ends, the elector may campaign again (reelect), the
// shard waiting for it is handed over (release), and the next start round
// waits for the lease.
type standDown struct {
	s       *root
	stage   standStage
	f       *fencing // the root's fencing while it lasts
	wait    *barrier
	reply   any           // the lost shard's elector.Fenced, if any
	release *shardRelease // the last shard's hand-over, if that is why
}

// standDown begins a stand-down: f's children stop with ctx.
func (s *root) standDown(f *fencing, ctx context.Context, reply any, release *shardRelease) {
	d := &standDown{s: s, f: f, reply: reply, release: release}
	s.fencing = f
	if s.start != nil {
		s.start = newReelectionRound(s, s.start)
	}
	s.quiesce(fencedChild)
	// A group's request still to start fenced children gives them up: the
	// next round starts them, and a request left owning them would start
	// them a second time beside it.
	s.requests.takeOut(fencedChild)
	s.obs.starting.Store(false)
	s.obs.started.Store(false)
	s.become(supervisor.PhaseElecting, "standing down")
	if d.wait = s.stopAll(d, f.recs, ctx); d.wait == nil {
		d.stopped()
	}
}

func (d *standDown) current(b *barrier) bool { return d.stage == standStopping && d.wait == b }
func (d *standDown) settled(*barrier, error) { d.stopped() }

// stopped: every controller and store has stopped.
func (d *standDown) stopped() {
	s, f := d.s, d.f
	d.become(standDone)
	d.wait = nil
	f.fenced()
	s.tellElector(d.reply)
	if d.release != nil {
		d.release.handOver()
	}
	if s.fencing != f || s.ending() {
		return
	}
	s.fencing = nil
	if s.start == nil {
		s.start = newReelectionRound(s, nil)
	}
	s.start.step()
}
