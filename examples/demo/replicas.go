package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/lease/shard"
)

// replicasConfig is the sharded demo's: replicas managers in one process
// over the in-memory Lease server, sharing shards shards.
type replicasConfig struct {
	replicas  int
	shards    int
	killAfter time.Duration // when replica-0 is killed (cut off, nothing released)
}

// The demo's lease timing: short, so that a killed replica's shards move
// within seconds (LeaseDuration + a retry or two).
const (
	demoLeaseDuration = 2 * time.Second
	demoRenewDeadline = time.Second
	demoRetryPeriod   = 250 * time.Millisecond
)

// runReplicas runs the sharded-leadership demo until ctx ends, or until the
// killed replica's shards have all moved: it prints which replica holds
// which shard each time that changes, then kills replica-0 as a SIGKILL
// would (cut off from the API server, nothing released) and shows its
// shards move to the others, and nothing else move.
//
// Each replica is a ControllerManager with Shards = cfg.shards over the
// in-memory Lease server: a store, and one controller per shard
// (AddSharded) that says when it starts and stops.
func runReplicas(ctx context.Context, cfg replicasConfig, out io.Writer) error {
	if cfg.replicas < 1 || cfg.shards < 1 {
		return fmt.Errorf("-replicas and -shards must be at least 1, got %d and %d", cfg.replicas, cfg.shards)
	}
	server := leasetest.NewServer()
	var mu sync.Mutex
	silenced := map[string]bool{} // killed replicas, and all once the demo is over
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !silenced["*"] {
			fmt.Fprintf(out, format+"\n", args...)
		}
	}
	replicaf := func(id, format string, args ...any) {
		mu.Lock()
		quiet := silenced[id]
		mu.Unlock()
		if !quiet {
			logf(id+": "+format, args...)
		}
	}
	silence := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		silenced[id] = true
	}
	type replica struct {
		client *leasetest.Client
		m      *cm.ControllerManager
	}
	yes := true
	spec := cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
		Enabled: &yes, LeaseName: "demo-controllers", LeaseNamespace: "demo", Shards: int32(cfg.shards),
		LeaseDuration: metav1.Duration{Duration: demoLeaseDuration}, RenewDeadline: metav1.Duration{Duration: demoRenewDeadline},
		RetryPeriod: metav1.Duration{Duration: demoRetryPeriod}, OnLeaseLost: cm.LeaseLostReelect,
	}}
	quiet := slog.New(slog.DiscardHandler)
	replicas := make([]*replica, cfg.replicas)
	for i := range replicas {
		id := fmt.Sprintf("replica-%d", i)
		client := server.Client(id)
		m, err := cm.NewControllerManager(cm.NewContext(client), spec, "", cm.WithIdentity(id), cm.WithLogger(quiet))
		if err != nil {
			return err
		}
		m.AddStore(demoStore{})
		m.AddSharded("worker", func(s cm.Shard) cm.Controller {
			return &shardWorker{name: fmt.Sprintf("worker-%d", s.Index), say: func(format string, args ...any) { replicaf(id, format, args...) }}
		})
		go func() { _ = m.Start(context.Background(), 0) }() // blocks until a shard is held; ShutdownAndWait ends it
		replicas[i] = &replica{client: client, m: m}
	}
	defer func() {
		silence("*")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, r := range replicas {
			r.m.ShutdownAndWait(sctx)
		}
	}()

	holders := func() []string {
		hs := make([]string, cfg.shards)
		for s := range hs {
			hs[s] = server.Holder("demo", shard.ShardLease("demo-controllers", s))
		}
		return hs
	}
	var last []string
	show := func(hs []string) {
		by := map[string][]string{}
		for s, h := range hs {
			if h == "" {
				h = "(nobody)"
			}
			by[h] = append(by[h], fmt.Sprint(s))
		}
		var lines []string
		for _, h := range slices.Sorted(func(yield func(string) bool) {
			for h := range by {
				if !yield(h) {
					return
				}
			}
		}) {
			lines = append(lines, fmt.Sprintf("  %-10s %2d shards: %s", h, len(by[h]), strings.Join(by[h], " ")))
		}
		logf("holders:\n%s", strings.Join(lines, "\n"))
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	kill := time.After(cfg.killAfter)
	var killed []int // replica-0's shards when it was killed
	var killedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kill:
			for s, h := range holders() {
				if h == "replica-0" {
					killed = append(killed, s)
				}
			}
			logf("killing replica-0 (cut off from the API server, nothing released); it held shards %v", killed)
			logf("(it fences them itself once it cannot renew for %s; the others take them %s after its last renewal)",
				demoRenewDeadline, demoLeaseDuration)
			killedAt = time.Now()
			replicas[0].client.Partition(true)
			if cfg.replicas == 1 {
				return nil
			}
		case <-tick.C:
		}
		hs := holders()
		if !slices.Equal(hs, last) {
			show(hs)
			last = hs
		}
		if killed != nil && !slices.Contains(hs, "replica-0") && !slices.Contains(hs, "") {
			logf("replica-0's shards %v run on the other replicas %s after the kill (lease %s, retry %s)",
				killed, time.Since(killedAt).Round(10*time.Millisecond), demoLeaseDuration, demoRetryPeriod)
			return nil
		}
	}
}

// shardWorker is the demo's controller of one shard: it says when it runs.
type shardWorker struct {
	name string
	say  func(format string, args ...any)
}

func (w *shardWorker) Name() string { return w.name }

func (w *shardWorker) Run(context.Context) error {
	w.say("%s runs (its shard's Lease is held here)", w.name)
	return nil
}

func (w *shardWorker) Shutdown(context.Context) { w.say("%s stopped", w.name) }

func (w *shardWorker) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: w.name, Healthy: true}
}

// demoStore is the replicas' store: recovered before a replica's first
// shard runs.
type demoStore struct{}

func (demoStore) Name() string                  { return "cache" }
func (demoStore) Recover(context.Context) error { return nil }
func (demoStore) Shutdown(context.Context)      {}
