package shard

import (
	"context"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/lease"
)

// The messages an Elector's actor (Props) sends its parent, the manager's
// root supervisor. They are the Callbacks, as messages: each Done is the
// callback's done function, to be called once, from any goroutine.
type (
	// Acquired: this replica now holds Shard; its children may run.
	Acquired struct{ Shard int }
	// Releasing: Shard is assigned to another replica, or the elector is
	// resigning. Call Done once nothing of the shard runs any more; the
	// Lease is renewed until then and released right after.
	Releasing struct {
		Shard int
		Done  func()
	}
	// Lost: Shard's Lease was taken by another replica or could not be
	// renewed; its children must stop within Config.FenceTimeout. Call Done
	// once they have to campaign for the shard again; never, to give it up.
	Lost struct {
		Shard int
		Done  func()
		// Reason says why, in the words the elector also logged ("taken
		// by replica-b", "not renewed for more than 2.75s"); empty when
		// the elector gave none.
		Reason string
	}
	// HolderChanged: the elector observed a new holder of Shard's Lease,
	// this replica included; Identity is empty once the Lease has been
	// released and nobody holds it.
	HolderChanged struct {
		Shard    int
		Identity string
	}
)

// Props returns the Props of an actor that runs e for its parent: on start
// it runs e with Callbacks that send Acquired, Releasing, Lost and
// HolderChanged to the parent (whatever e's Config had); on lease.Resign it ends e's Run, which
// hands every held shard back (Releasing for each), and answers
// lease.Released once Run has returned; when stopped without Resign it
// abandons the shards (Abandon: nothing is released, the Leases expire).
// An Elector runs once: spawn the Props once.
func Props(e *Elector) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &electorActor{e: e} })
}

type electorActor struct {
	e       *Elector
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run has returned
	resigns bool
}

// ran is sent to the actor itself when Run has returned.
type ran struct{}

func (a *electorActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		parent, self, system := ctx.Parent(), ctx.Self(), ctx.ActorSystem()
		send := func(m any) { system.Root.Send(parent, m) }
		a.e.cfg.Callbacks = Callbacks{
			Acquired: func(i int) { send(Acquired{Shard: i}) },
			Release:  func(i int, done func()) { send(Releasing{Shard: i, Done: done}) },
			Lost:     func(i int, reason string, done func()) { send(Lost{Shard: i, Done: done, Reason: reason}) },
			HolderChanged: func(i int, identity string) {
				send(HolderChanged{Shard: i, Identity: identity})
			},
		}
		runCtx, cancel := context.WithCancel(context.Background())
		a.cancel, a.done = cancel, make(chan struct{})
		go func() {
			defer close(a.done)
			a.e.Run(runCtx)
			system.Root.Send(self, ran{})
		}()
	case lease.Resign:
		a.resigns = true
		a.cancel()
	case ran:
		if a.resigns {
			ctx.Send(ctx.Parent(), lease.Released{})
		}
	case *actor.Stopping:
		if a.cancel != nil {
			a.e.Abandon()
			a.cancel()
			<-a.done
		}
	}
}
