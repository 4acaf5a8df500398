package supervise

import (
	"context"
	"fmt"

	"github.com/actorkube/controllermanager/supervisor"
	"github.com/asynkron/protoactor-go/actor"
)

// replyProcess is a one-shot protoactor Process that receives the Reply to
// one Ask. Unlike an actor.Future it has no timer of its own: Ask waits on
// the caller's context.
type replyProcess struct {
	ch chan supervisor.Reply
}

func (p *replyProcess) SendUserMessage(_ *actor.PID, message interface{}) {
	if env, ok := message.(*actor.MessageEnvelope); ok {
		message = env.Message
	}
	var r supervisor.Reply
	switch m := message.(type) {
	case supervisor.Reply:
		r = m
	case *actor.DeadLetterResponse:
		// The request reached no actor: the supervisor had already stopped
		// (its PID left the registry before Terminated was closed).
		r = supervisor.Reply{Err: supervisor.ErrStopped}
	default:
		r = supervisor.Reply{Value: m}
	}
	select {
	case p.ch <- r:
	default: // answered already; a second answer is a bug upstream, not ours to block on
	}
}

func (p *replyProcess) SendSystemMessage(*actor.PID, interface{}) {}
func (p *replyProcess) Stop(*actor.PID)                           {}

// Facade plumbing: Ask sends msg to the root supervisor pid and waits for
// its Reply (a manager's Request is built on it), for ctx
// to end, or for the manager's actors to stop (terminated), whichever comes
// first. It returns the Reply's Value and Err; ctx's error, wrapped, when ctx
// ended first; ErrStopped when the manager had stopped.
func Ask(ctx context.Context, system *actor.ActorSystem, pid *actor.PID, terminated <-chan struct{}, msg any) (any, error) {
	select {
	case <-terminated:
		return nil, fmt.Errorf("%s: %w", describe(msg), supervisor.ErrStopped)
	default:
	}
	p := &replyProcess{ch: make(chan supervisor.Reply, 1)}
	reg := system.ProcessRegistry
	self, _ := reg.Add(p, "ask"+reg.NextId())
	defer reg.Remove(self)
	system.Root.RequestWithCustomSender(pid, msg, self)
	select {
	case r := <-p.ch:
		if r.Err == supervisor.ErrStopped { // a dead letter: name the request, as below
			return nil, fmt.Errorf("%s: %w", describe(msg), supervisor.ErrStopped)
		}
		return r.Value, r.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", describe(msg), ctx.Err())
	case <-terminated:
		// The reply may have raced the end of the tree.
		select {
		case r := <-p.ch:
			return r.Value, r.Err
		default:
			return nil, fmt.Errorf("%s: %w", describe(msg), supervisor.ErrStopped)
		}
	}
}
