// Package elector hosts a lease/shard Elector as an actor, a child of the
// root supervisor (internal/supervise), and is the message set the two
// speak. Every message is a value: where the Elector hands the supervisor a
// done function (a shard to hand over, a shard lost), the actor keeps it and
// the supervisor answers with a message naming the shard (HandedOver,
// Fenced), so that no closure crosses a mailbox.
//
//	Elector goroutine ──callback──▶ elector actor ──Acquired, Releasing, Lost,──▶ root supervisor
//	                                               HolderChanged, Released
//	Elector ◀──done()── elector actor ◀──HandedOver, Fenced, Resign────────────── root supervisor
//
// Every callback passes through the actor's own mailbox before it is sent
// on, so the supervisor receives them in the order the Elector made them.
package elector

import (
	"context"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/lease/shard"
)

// Messages the elector actor sends its parent, the root supervisor.
type (
	// Acquired is sent when this replica holds Shard: its children may run.
	Acquired struct{ Shard int }
	// Releasing is sent when Shard is assigned to another replica, or the
	// elector is resigning. The parent answers HandedOver once nothing of
	// the shard runs any more; the Lease is renewed until then and released
	// right after.
	Releasing struct{ Shard int }
	// Lost is sent when Shard's Lease was taken by another replica or could
	// not be renewed; its children must stop within the fence timeout. The
	// parent answers Fenced once they have, to campaign for the shard again;
	// never, to give it up.
	Lost struct {
		Shard int
		// Reason says why, in the words the elector also logged ("taken
		// by replica-b", "not renewed for more than 2.75s"); empty when
		// the elector gave none.
		Reason string
	}
	// HolderChanged is sent when the elector observed a new holder of
	// Shard's Lease, this replica included; Identity is empty once the
	// Lease has been released and nobody holds it.
	HolderChanged struct {
		Shard    int
		Identity string
	}
	// Released is sent after Resign, once the elector has stopped: every
	// shard it held has been handed over (or lost meanwhile).
	Released struct{}
)

// Messages the root supervisor sends the elector actor.
type (
	// HandedOver answers Releasing: nothing of Shard runs here any more.
	HandedOver struct{ Shard int }
	// Fenced answers Lost: Shard's children have stopped; campaign for it
	// again.
	Fenced struct{ Shard int }
	// Resign asks the elector to hand every shard back (Releasing for each)
	// and stop; Released follows.
	Resign struct{}
)

// New returns the Elector of cfg and the Props of an actor that runs it for
// its parent: cfg.Callbacks is replaced by callbacks that become the
// messages above; on Resign the actor ends the Elector's Run and answers
// Released once Run has returned; when stopped without Resign it abandons
// the shards (shard.Elector.Abandon: nothing is released, the Leases
// expire). An Elector runs once: spawn the Props once.
func New(cfg shard.Config) (*shard.Elector, *actor.Props, error) {
	to := &sink{}
	send := func(m any) {
		if t := to.target.Load(); t != nil {
			t.system.Root.Send(t.self, m)
		}
	}
	cfg.Callbacks = shard.Callbacks{
		Acquired: func(i int) { send(callback{Acquired{Shard: i}}) },
		Release:  func(i int, done func()) { send(withDone{Releasing{Shard: i}, i, done}) },
		Lost: func(i int, reason string, done func()) {
			send(withDone{Lost{Shard: i, Reason: reason}, i, done})
		},
		HolderChanged: func(i int, identity string) { send(callback{HolderChanged{Shard: i, Identity: identity}}) },
	}
	e, err := shard.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return e, actor.PropsFromProducer(func() actor.Actor { return &electorActor{e: e, to: to} }), nil
}

// sink is where the Elector's callbacks go: the actor, once it has started
// (the Elector runs only from then on).
type sink struct{ target atomic.Pointer[target] }

type target struct {
	system *actor.ActorSystem
	self   *actor.PID
}

// electorActor is the actor of Props. Its fields are owned by Receive; the
// Elector runs in a goroutine of its own.
type electorActor struct {
	e       *shard.Elector
	to      *sink
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run has returned
	resigns bool
	// The done functions the Elector handed over, by shard, oldest first,
	// until the parent's HandedOver or Fenced.
	handOvers, fences map[int][]func()
}

// The actor's own messages: a callback, on its way to the parent.
type (
	released struct{} // Run has returned
	callback struct{ msg any }
	withDone struct {
		msg   any // Releasing or Lost
		shard int
		done  func()
	}
)

// Receive handles one message; it never blocks but on Stopping, where it
// waits for Run, which Abandon and the cancellation end at once.
func (a *electorActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case callback:
		ctx.Send(ctx.Parent(), m.msg)
	case withDone:
		if _, lost := m.msg.(Lost); lost {
			a.fences[m.shard] = append(a.fences[m.shard], m.done)
		} else {
			a.handOvers[m.shard] = append(a.handOvers[m.shard], m.done)
		}
		ctx.Send(ctx.Parent(), m.msg)
	case HandedOver:
		callOldest(a.handOvers, m.Shard)
	case Fenced:
		callOldest(a.fences, m.Shard)
	case Resign:
		a.resigns = true
		a.cancel()
	case released:
		if a.resigns {
			ctx.Send(ctx.Parent(), Released{})
		}
	case *actor.Stopping:
		if a.cancel != nil {
			a.e.Abandon()
			a.cancel()
			<-a.done
		}
	}
}

// start runs the Elector, its callbacks passing through this actor.
func (a *electorActor) start(ctx actor.Context) {
	self, system := ctx.Self(), ctx.ActorSystem()
	a.handOvers, a.fences = map[int][]func(){}, map[int][]func(){}
	a.to.target.Store(&target{system: system, self: self})
	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		a.e.Run(runCtx)
		system.Root.Send(self, released{})
	}()
}

// callOldest calls and forgets the oldest done function kept for shard.
func callOldest(dones map[int][]func(), shard int) {
	q := dones[shard]
	if len(q) == 0 {
		return
	}
	done := q[0]
	if len(q) == 1 {
		delete(dones, shard)
	} else {
		dones[shard] = q[1:]
	}
	done()
}
