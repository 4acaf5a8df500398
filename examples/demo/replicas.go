package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/lease/shard"
)

// replicasConfig is the sharded demo's: replicas shard electors in one
// process over the in-memory Lease server, sharing shards shards.
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
// would and shows its shards move to the others, and nothing else move.
//
// The replicas are shard electors (package lease/shard), each "running" a
// shard from its Acquired callback until Release or Lost; the manager's
// own sharding is not wired yet.
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
		cancel context.CancelFunc
		done   chan struct{}
	}
	replicas := make([]*replica, cfg.replicas)
	for i := range replicas {
		id := fmt.Sprintf("replica-%d", i)
		client := server.Client(id)
		e, err := shard.New(shard.Config{Client: client, Namespace: "demo", Name: "demo-controllers", Identity: id, Shards: cfg.shards,
			LeaseDuration: demoLeaseDuration, RenewDeadline: demoRenewDeadline, RetryPeriod: demoRetryPeriod,
			Callbacks: shard.Callbacks{
				Acquired: func(s int) { replicaf(id, "acquired shard %d, its controllers run", s) },
				Release:  func(s int, done func()) { replicaf(id, "releasing shard %d, its controllers stopped", s); done() },
				Lost:     func(s int, done func()) { replicaf(id, "lost shard %d, fenced", s); done() },
			}})
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(context.Background())
		r := &replica{client: client, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); e.Run(rctx) }()
		replicas[i] = r
	}
	defer func() {
		silence("*")
		for _, r := range replicas {
			r.cancel()
		}
		for _, r := range replicas {
			<-r.done
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
			silence("replica-0")
			killedAt = time.Now()
			replicas[0].client.Partition(true)
			replicas[0].cancel()
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
