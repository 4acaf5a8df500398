package elector_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/actorkube/controllermanager/internal/elector"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/lease/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// parent spawns the elector actor and hands every message it sends to the
// test; what the test gives it on answer goes to the elector.
type parent struct {
	props  *actor.Props
	got    chan any
	answer chan any
}

func (p *parent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Spawn(p.props)
	case elector.Acquired, elector.Releasing, elector.Lost, elector.HolderChanged, elector.Released:
		p.got <- m
	case send:
		for _, c := range ctx.Children() {
			ctx.Send(c, m.msg)
		}
	}
}

type send struct{ msg any }

// expect waits for the parent to receive want, skipping HolderChanged.
func expect(t *testing.T, got chan any, want any) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-got:
			if _, ok := m.(elector.HolderChanged); ok {
				if _, wanted := want.(elector.HolderChanged); !wanted {
					continue
				}
			}
			require.Equal(t, want, m)
			return
		case <-deadline:
			t.Fatalf("no %T within 10s", want)
		}
	}
}

// TestMessagesNotClosures checks the round trip: the elector's Release
// callback reaches the parent as Releasing with no function in it, and the
// Lease is handed over only once the parent answers HandedOver.
func TestMessagesNotClosures(t *testing.T) {
	server := leasetest.NewServer()
	e, props, err := elector.New(shard.Config{
		Client: server.Client("a"), Namespace: "default", Name: "lease", Identity: "a", SingleLease: true,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NotNil(t, e)
	system := actor.NewActorSystem()
	p := &parent{props: props, got: make(chan any, 16)}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	defer func() { _ = system.Root.StopFuture(pid).Wait() }()

	expect(t, p.got, elector.Acquired{Shard: 0})
	system.Root.Send(pid, send{elector.Resign{}})
	expect(t, p.got, elector.Releasing{Shard: 0})
	holder := server.Holder("default", "lease")
	require.Equal(t, "a", holder, "released before the parent answered HandedOver")
	system.Root.Send(pid, send{elector.HandedOver{Shard: 0}})
	expect(t, p.got, elector.Released{})
	holder = server.Holder("default", "lease")
	require.Empty(t, holder, "HandedOver releases the Lease")
}
