package ctrlruntime

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
)

type countingReconciler struct {
	mu   sync.Mutex
	keys []string
}

func (c *countingReconciler) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, req.NamespacedName.String())
	return reconcile.Result{}, nil
}

// Every key is reconciled by exactly one of the shards' reconcilers, the
// one whose Shard owns it; a single shard reconciles everything.
func TestShardReconcilerSplitsTheKeys(t *testing.T) {
	const shards = 4
	inner := make([]*countingReconciler, shards)
	rs := make([]reconcile.Reconciler, shards)
	for i := range shards {
		inner[i] = &countingReconciler{}
		rs[i] = ShardReconciler(cm.Shard{Index: i, Count: shards}, inner[i])
	}
	seen := map[string]int{}
	for k := range 200 {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", k%7), Name: fmt.Sprintf("obj-%d", k)}}
		for _, r := range rs {
			_, err := r.Reconcile(context.Background(), req)
			require.NoError(t, err)
		}
	}
	for i, c := range inner {
		assert.NotEmpty(t, c.keys, "shard %d reconciled nothing", i)
		for _, key := range c.keys {
			seen[key]++
			assert.Equal(t, i, cm.ShardOf(key, shards), "%s reconciled by shard %d", key, i)
		}
	}
	assert.Len(t, seen, 200)
	for key, n := range seen {
		assert.Equal(t, 1, n, "%s reconciled %d times", key, n)
	}
	one := &countingReconciler{}
	assert.Same(t, one, ShardReconciler(cm.Shard{Index: 0, Count: 1}, one), "a single shard is every key")
}
