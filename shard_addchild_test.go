package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// A controller added by AddChild into a plain group, under sharded
// leadership, is pinned by its path, ShardOf("<group>/<name>", S), as the
// same controller added before Start is: one rule whenever it was added.
// ("web": FNV-1a's low bit is the parity of the key's bytes, and "web/"
// has an odd number of odd bytes, so a path's shard differs from its
// name's.) (It was pinned by its bare name, so that the same child moved to
// another shard depending on when it was added; found by the state-space
// test, which judged its fencing by its path.)
func TestAddChildIntoAGroupIsPinnedByItsPath(t *testing.T) {
	t.Parallel()
	srv, log := leasetest.NewServer(), &seamLog{}
	m := seamManager(t, srv, 2)
	// Names whose bare name hashes to shard 0 and whose path to shard 1.
	split := func(n string) bool { return cm.ShardOf(n, 2) == 0 && cm.ShardOf("web/"+n, 2) == 1 }
	static := newSeamChild(log, "web", pickName(t, "static-%d", split))
	m.Add(cm.NewGroup("web", cm.SupervisionSpec{}, seamController{static}))
	gStart(t, m)
	gEventually(t, "both shards held", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	// Shard 1 goes to another replica for good: only shard 0 is held here.
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-1", "thief", time.Hour))
	gEventually(t, "shard 1 lost", func() bool { return !holdsShard(t, m, 1) })
	gEventually(t, "the static child stopped with shard 1", func() bool { return gState(t, m, static.path) != supervisor.StateRunning })

	added := newSeamChild(log, "web", pickName(t, "added-%d", split))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	_, err := m.Request(ctx, supervisor.AddChild{Parent: "web", Runnable: seamController{added}})
	require.NoError(t, err)

	st := mustStatus(t, m)
	require.Len(t, st.Shards, 2)
	for _, c := range []*seamChild{static, added} {
		assert.Contains(t, st.Shards[1].Children, c.path, "%s is pinned by its path to shard 1", c.path)
		assert.NotContains(t, st.Shards[0].Children, c.path, c.path)
		assert.NotEqual(t, supervisor.StateRunning, gState(t, m, c.path), "%s does not run without shard 1", c.path)
	}
	assert.Equal(t, 0, added.runCount(), "the added child never ran here")
	seamShutdown(t, m)
}
