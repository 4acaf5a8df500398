package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// plainControllers is how many controllers addShardedControllers adds with plain Add,
// each pinned by the manager to the shard ShardOf(its name, shards).
const plainControllers = 12

// addShardedControllers adds the controllers of a replica run with --shards=shards > 1,
// 3·shards of them when shards = plainControllers (the scenarios' 12 shards: 36):
//
//   - AddSharded("ticker", …): "ticker-<i>", a worker loop, on shard i;
//   - AddSharded("informer", …): "informer-<i>", over a ConfigMap informer, on shard i;
//   - plainControllers worker loops "plain-00", "plain-01", … added with Add, on
//     whatever shard ShardOf gives their names.
//
// A sharded controller is named from the Shard it is built with, so that a journal
// naming "ticker-3" on a replica shows that the manager built it for shard 3 (and the
// tests check it ran only where shard 3 was held).
func addShardedControllers(mgr *cm.ControllerManager, shards int, client kubernetes.Interface, namespace string, rec *journal.Writer) {
	mgr.AddSharded("ticker", func(s cm.Shard) cm.Controller {
		return newTicker(shardedName("ticker", s, shards), rec)
	})
	mgr.AddSharded("informer", func(s cm.Shard) cm.Controller {
		return newConfigMapWatcher(shardedName("informer", s, shards), client, namespace, rec)
	})
	for i := range plainControllers {
		mgr.Add(newTicker(fmt.Sprintf("plain-%02d", i), rec))
	}
}

// shardedName is "<name>-<index>", the name AddSharded gives the child built with s;
// a Shard whose Count is not the configured number of shards is named for what it is,
// "<name>-<index>-of-<count>", so that the tests see the mistake.
func shardedName(name string, s cm.Shard, shards int) string {
	if s.Count != shards {
		return fmt.Sprintf("%s-%d-of-%d", name, s.Index, s.Count)
	}
	return fmt.Sprintf("%s-%d", name, s.Index)
}
