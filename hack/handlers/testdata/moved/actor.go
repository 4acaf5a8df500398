package moved

import "github.com/asynkron/protoactor-go/actor"

type ping struct{}
type pong struct{}

type renamedActor struct{}

func (a *renamedActor) Receive(ctx actor.Context) { a.dispatch(ctx.Message()) }

func (a *renamedActor) dispatch(m any) {
	switch m := m.(type) {
	case ping:
		a.handlePing(m)
	case pong, *actor.Started:
		onPong()
	case *actor.Stopping:
	}
}
