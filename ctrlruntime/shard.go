package ctrlruntime

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
)

// ShardReconciler returns r restricted to the keys shard owns: a request
// whose key, its NamespacedName as "namespace/name" ("name" for a
// cluster-scoped object), is not owned (shard.Owns) is dropped unreconciled.
// With sharded leadership, each of AddSharded's reconcilers then handles
// its own part of the keys, on whichever replica holds its shard:
//
//	mgr.AddSharded("mirror", func(s cm.Shard) cm.Controller {
//		c, err := ctrlruntime.NewControllerManagedBy(ctx).
//			Named(fmt.Sprintf("mirror-%d", s.Index)).For(&corev1.ConfigMap{}).
//			ForShard(s).Build(reconciler)
//		if err != nil {
//			panic(err) // AddSharded makes Start fail, naming the child
//		}
//		return c
//	})
//
// The reconcilers share the Context's informers: every replica still
// watches every object, and the filter costs one hash per request. With a
// single shard (Count < 2) r is returned as it is.
func ShardReconciler(shard cm.Shard, r reconcile.Reconciler) reconcile.Reconciler {
	if shard.Count < 2 || r == nil {
		return r
	}
	return &shardReconciler{shard: shard, r: r}
}

type shardReconciler struct {
	shard cm.Shard
	r     reconcile.Reconciler
}

func (s *shardReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !s.shard.Owns(req.NamespacedName.String()) {
		return reconcile.Result{}, nil
	}
	return s.r.Reconcile(ctx, req)
}

// ForShard restricts the reconciler Complete builds to the keys shard owns
// (ShardReconciler): give it the Shard that AddSharded's build receives.
func (b *Builder) ForShard(shard cm.Shard) *Builder {
	b.shard = shard
	return b
}
