package childactor

import "github.com/asynkron/protoactor-go/actor"

// NewProps returns the Props of one child actor hosting spec, for the
// tests that drive a child alone (the supervisor spawns its children with
// a Spawner).
func NewProps(spec Spec, cfg Config) *actor.Props {
	c := newChild(&spec, cfg.filled(), nil)
	return actor.PropsFromProducer(func() actor.Actor { return c }, childMailbox)
}
