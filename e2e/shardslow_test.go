package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
	"github.com/actorkube/controllermanager/e2e/internal/journal"

	cm "github.com/actorkube/controllermanager"
)

// The slow-writes scenario: S = 64 shards over three replicas, every Lease write held
// slowLeaseWrite by a proxy in front of the API server, at the suite's timing (lease 4s,
// renew deadline 2s, retry 500ms).
//
// Why that timing fits: a replica holds ⌈64/3⌉ = 22 shards and renews them and its member
// Lease side by side each retry period, one write's latency (100ms) of the 500ms; after a
// SIGKILL each survivor has ⌈22/2⌉ = 11 more to take, which side by side cost one more
// write's latency. Only one after another do they not fit: 11 × 100ms = 1.1s of a pass
// with nothing renewed, 22 × 100ms = 2.2s (a lone replica's share at the start) past the
// renew deadline. A larger timing would hide exactly that.
const (
	slowShards     = 64
	slowLeaseWrite = 100 * time.Millisecond
	// slowSettleTimeout bounds the start: three processes under -race, 64 shards, 2·64
	// controllers (each informer lists and watches).
	slowSettleTimeout = 20 * time.Second
	// slowRecoverTimeout is how long the survivors are watched after the kill: the goal
	// is LD + 2 × RP = 5s; watched three times as long so that a late recovery is
	// measured, not only failed.
	slowRecoverTimeout = 3 * (leaseDuration + 2*retryPeriod)
	// slowPollInterval is how often the test reads the journals: 64 shards' journals
	// are large, and decoding them every 20ms would take CPU from the replicas. The
	// figures come from the journals' timestamps, not from when the test looked.
	slowPollInterval = 100 * time.Millisecond
)

// slowFlags are the flags of every replica of TestShardedSlowLeaseWrites, after the
// kubeconfig that points it at the proxy.
var slowFlags = []string{"--shards=" + strconv.Itoa(slowShards), "--on-lease-lost=Reelect"}

// slowShardOf is the shard of a controller of the replica program run with --shards=64:
// i for "ticker-<i>" and "informer-<i>", ShardOf(name, 64) for the "plain-NN".
func slowShardOf(name string) int {
	for _, family := range []string{"ticker-", "informer-"} {
		if rest, ok := strings.CutPrefix(name, family); ok {
			if i, err := strconv.Atoi(rest); err == nil {
				return i
			}
		}
	}
	return cm.ShardOf(name, slowShards)
}

// slowControllersOfShard lists, per shard, the controllers the program pins to it.
func slowControllersOfShard() [][]string {
	of := make([][]string, slowShards)
	for i := range slowShards {
		of[i] = append(of[i], fmt.Sprintf("ticker-%d", i), fmt.Sprintf("informer-%d", i))
	}
	for i := range 12 { // internal/cmd/replica/sharded.go: plainControllers
		name := fmt.Sprintf("plain-%02d", i)
		of[slowShardOf(name)] = append(of[slowShardOf(name)], name)
	}
	return of
}

// slowSettled is settled for S = 64: each shard held by exactly one of live, which runs
// all its controllers while no other runs any, observed as its holder by every one of
// live, each holding ⌊S/R⌋ or ⌈S/R⌉.
func slowSettled(live []*replica, all [][]journal.Entry) (p placement, why string) {
	views := make([]shardView, len(live))
	for i := range live {
		views[i] = viewOf(all[i])
	}
	of := slowControllersOfShard()
	p = make(placement, slowShards)
	for i := range slowShards {
		for k, r := range live {
			if !views[k].held[i] {
				continue
			}
			if p[i] != nil {
				return nil, fmt.Sprintf("shard %d: held by %s and %s", i, p[i].id, r.id)
			}
			p[i] = r
		}
		if p[i] == nil {
			return nil, fmt.Sprintf("shard %d: held by none", i)
		}
		for k, r := range live {
			for _, name := range of[i] {
				st := views[k].states[name]
				if r == p[i] && st.kind != journal.Running {
					return nil, fmt.Sprintf("shard %d: %s holds it, %s is %q", i, r.id, name, st.kind)
				}
				if r != p[i] && active(st) {
					return nil, fmt.Sprintf("shard %d: %s holds it, %s is %q on %s", i, p[i].id, name, st.kind, r.id)
				}
			}
			if views[k].observed[i] != p[i].id {
				return nil, fmt.Sprintf("shard %d: %s holds it, %s observes %q", i, p[i].id, r.id, views[k].observed[i])
			}
		}
	}
	low, high := slowShards/len(live), (slowShards+len(live)-1)/len(live)
	for _, r := range live {
		if n := p.count(r); n < low || n > high {
			return nil, fmt.Sprintf("unbalanced: %s holds %d shards (%s)", r.id, n, p.counts(live))
		}
	}
	return p, ""
}

// pollSettled reads the journals of live until they have settled or timeout passes; it
// fails t at once if one of them exits, and otherwise returns what it saw last, so that
// a test that did not settle can still report where it stands.
func pollSettled(t *testing.T, timeout time.Duration, live []*replica) (p placement, why string, all [][]journal.Entry) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(slowPollInterval)
	defer tick.Stop()
	for {
		all = make([][]journal.Entry, len(live))
		for i, r := range live {
			all[i] = r.entries(t)
		}
		if p, why = slowSettled(live, all); p != nil {
			return p, "", all
		}
		for _, r := range live {
			select {
			case <-r.proc.Done():
				if r.killedAt.IsZero() {
					t.Fatalf("replica %s exited unexpectedly: %v", r.id, r.proc.ExitErr())
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			return nil, why, all
		}
		<-tick.C
	}
}

// shardChange is a replica starting (ShardAcquired) or ceasing (ShardReleased,
// ShardLost) to hold a shard, from its journal.
type shardChange struct {
	at    time.Time
	who   int // index of the replica
	shard int
	held  bool
	lost  bool
}

// shardChanges merges the shard changes of every journal of all, in time order.
func shardChanges(all [][]journal.Entry) []shardChange {
	var changes []shardChange
	for k, entries := range all {
		for _, e := range entries {
			if e.Kind != journal.Supervision {
				continue
			}
			switch e.Type {
			case "ShardAcquired":
				changes = append(changes, shardChange{at: e.At(), who: k, shard: e.Shard, held: true})
			case "ShardReleased", "ShardLost":
				changes = append(changes, shardChange{at: e.At(), who: k, shard: e.Shard, lost: e.Type == "ShardLost"})
			}
		}
	}
	slices.SortStableFunc(changes, func(a, b shardChange) int { return a.at.Compare(b.at) })
	return changes
}

// coverage replays changes: from since on, the first instant every one of the S shards
// was held by at least one of the replicas, and the instant from which every shard was
// held without a gap until the end of changes (zero when not all are held at the end).
func coverage(changes []shardChange, replicas int, since time.Time) (first, stable time.Time) {
	held := make([]map[int]bool, replicas)
	for k := range held {
		held[k] = map[int]bool{}
	}
	covered := func() bool {
		for i := range slowShards {
			if !slices.ContainsFunc(held, func(h map[int]bool) bool { return h[i] }) {
				return false
			}
		}
		return true
	}
	was := false
	for _, c := range changes {
		if c.held {
			held[c.who][c.shard] = true
		} else {
			delete(held[c.who], c.shard)
		}
		if c.at.Before(since) {
			continue
		}
		now := covered()
		if now && !was {
			stable = c.at
			if first.IsZero() {
				first = c.at
			}
		}
		was = now
	}
	if !was {
		stable = time.Time{}
	}
	return first, stable
}

// leaseRate is the proxy's Lease requests received in [from, until): per second, and the
// breakdown per verb with the count of every answer but 200 and 201, and how long the
// apiserver took to answer the writes after the proxy had held them.
func leaseRate(requests []cluster.LeaseRequest, from, until time.Time) (float64, string) {
	verbs := map[string]int{}
	others := map[string]int{}
	var took []time.Duration // past the proxy's delay
	n := 0
	for _, r := range requests {
		if r.Received.Before(from) || !r.Received.Before(until) || r.Verb == "WATCH" {
			continue // a watch is one request however long it runs: counted by its start elsewhere
		}
		n++
		verbs[r.Verb]++
		if r.Code != 0 && r.Verb != "GET" && r.Verb != "LIST" {
			took = append(took, r.Took)
		}
		switch r.Code {
		case http.StatusOK, http.StatusCreated:
		case 0:
			others[r.Verb+" given up by the client"]++
		default:
			others[fmt.Sprintf("%s %d", r.Verb, r.Code)]++
		}
	}
	window := until.Sub(from).Seconds()
	var parts []string
	if len(took) > 0 {
		slices.Sort(took)
		parts = append(parts, fmt.Sprintf("apiserver's own time per write: median %s, 95th %s",
			took[len(took)/2].Round(time.Millisecond), took[len(took)*95/100].Round(time.Millisecond)))
	}
	for _, v := range slices.Sorted(maps.Keys(verbs)) {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", v, float64(verbs[v])/window))
	}
	for _, k := range slices.Sorted(maps.Keys(others)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, others[k]))
	}
	return float64(n) / window, strings.Join(parts, ", ") + fmt.Sprintf(" over %s", until.Sub(from).Round(time.Millisecond))
}

// lostSince counts the ShardLost events after since in entries, and which of shards
// (those the replica held then) were among them.
func lostSince(entries []journal.Entry, since time.Time, shards []int) (events int, own []int) {
	for _, e := range entries {
		if e.Kind != journal.Supervision || e.Type != "ShardLost" || e.At().Before(since) {
			continue
		}
		events++
		if slices.Contains(shards, e.Shard) && !slices.Contains(own, e.Shard) {
			own = append(own, e.Shard)
		}
	}
	slices.Sort(own)
	return events, own
}

// heldAt is the shards a replica held at instant at, from its journal.
func heldAt(entries []journal.Entry, at time.Time) []int {
	held := map[int]bool{}
	for _, e := range entries {
		if e.At().After(at) {
			break
		}
		if e.Kind != journal.Supervision {
			continue
		}
		switch e.Type {
		case "ShardAcquired":
			held[e.Shard] = true
		case "ShardReleased", "ShardLost":
			delete(held, e.Shard)
		}
	}
	return slices.Sorted(maps.Keys(held))
}

// TestShardedSlowLeaseWrites runs three replica processes with S = 64 shard Leases behind
// a proxy that holds every Lease write (create, update, patch, delete) for 100ms before
// passing it to the API server; reads and watches pass at once. The replicas settle
// (every shard held by one, 21/21/22, its controllers running), are measured steady over
// a window, then one is SIGKILLed. From the survivors' journals:
//
//   - the survivors' own shards lost after the kill: goal 0 (a peer's crash costs the
//     survivors none of theirs);
//   - SIGKILL → every shard held again: goal LD + 2 × RP, strictly (the killed
//     replica's leases expire at most LD after the kill; a survivor takes a shard at its
//     first retry after that, at most RP later; the second RP is the write's own time,
//     100ms here, and the watch's lag). TestShardedReplicaProcesses allows the suite's
//     request slack on top; this test does not, because the goal is what it measures;
//   - the Lease requests per second the proxy forwarded, steady and after the kill.
//
// Issue 23, "On the real API server". It fails on an Elector that campaigns one shard
// after another with its renewals waiting behind the pass. With
// $E2E_SLOW_WRITES_FROM=settled the proxy holds the writes only from the steady window
// on, which measures the SIGKILL alone.
func TestShardedSlowLeaseWrites(t *testing.T) {
	// $E2E_SLOW_WRITES_FROM=settled holds the writes only once the replicas have
	// settled, so that the SIGKILL is measured on its own even where a start under
	// slow writes never settles; the default, "start", is the scenario of the issue.
	from := os.Getenv("E2E_SLOW_WRITES_FROM")
	switch from {
	case "":
		from = "start"
	case "start", "settled":
	default:
		t.Fatalf("E2E_SLOW_WRITES_FROM=%q: want start or settled", from)
	}
	var slow atomic.Bool
	slow.Store(from == "start")
	s := newScenario(t)
	proxy := cluster.StartProxy(t, s.cluster, func(req *http.Request) time.Duration {
		if slow.Load() && cluster.IsLeaseWrite(req) {
			return slowLeaseWrite
		}
		return 0
	})
	flags := append([]string{"--kubeconfig=" + proxy.Kubeconfig()}, slowFlags...)
	note := fmt.Sprintf("(S = %d, R = 3, %s per Lease write from the %s)", slowShards, slowLeaseWrite, from)

	started := time.Now()
	live := []*replica{s.start("replica-a", flags...), s.start("replica-b", flags...), s.start("replica-c", flags...)}
	p, why, all := pollSettled(t, slowSettleTimeout, live)
	settledSeen := time.Now()
	startLost := 0
	for _, entries := range all {
		n, _ := lostSince(entries, started, nil)
		startLost += n
	}
	figureText(t, "slow writes: ShardLost events before settled", strconv.Itoa(startLost), note)
	if p == nil {
		held := make([]string, len(live))
		for k := range live {
			held[k] = strconv.Itoa(len(heldAt(all[k], settledSeen)))
		}
		t.Errorf("the three replicas did not settle within %s: %s; holding %s shards", slowSettleTimeout, why, strings.Join(held, "/"))
		figureText(t, "slow writes: start → settled", "not within "+slowSettleTimeout.String(), "(held "+strings.Join(held, "/")+")")
	} else {
		var at time.Time
		for i, h := range p {
			e, ok := shardEventAfter(t, h, "ShardAcquired", i, started)
			if ok {
				at = later(at, e.At())
			}
		}
		figure(t, "slow writes: start → every shard held, settled", at.Sub(started), note)
		figureText(t, "slow writes: shards per replica, settled", p.counts(live), "")
	}

	// Steady: a window of eight retry periods in which nobody may lose a shard.
	slow.Store(true)
	windowFrom := time.Now()
	window := time.NewTimer(loadWindow)
	select {
	case <-window.C:
	case <-t.Context().Done():
	}
	windowTo := time.Now()
	rate, breakdown := leaseRate(proxy.LeaseRequests(), windowFrom, windowTo)
	figureText(t, "slow writes: Lease requests/s, steady", fmt.Sprintf("%.1f req/s", rate), "("+breakdown+")")
	steadyLost := 0
	for _, r := range live {
		n, _ := lostSince(r.entries(t), windowFrom, nil)
		steadyLost += n
	}
	figureText(t, "slow writes: ShardLost events in the steady window", strconv.Itoa(steadyLost), "(goal 0)")
	if p != nil && steadyLost > 0 {
		t.Errorf("%d shards were lost in the steady window, after the replicas had settled", steadyLost)
	}

	// SIGKILL one, and watch the survivors take its shards.
	victim := live[2]
	survivors := live[:2]
	own := make([][]int, len(survivors))
	killed := victim.kill(t)
	for k, r := range survivors {
		own[k] = heldAt(r.entries(t), killed)
	}
	bound := leaseDuration + 2*retryPeriod
	p2, why2, after := pollSettled(t, slowRecoverTimeout, survivors)
	observed := time.Now()

	lostEvents, lostOwn := 0, 0
	var lostWhich []string
	for k, r := range survivors {
		n, which := lostSince(after[k], killed, own[k])
		lostEvents += n
		lostOwn += len(which)
		if len(which) > 0 {
			lostWhich = append(lostWhich, fmt.Sprintf("%s: %d of its %d (%v)", r.id, len(which), len(own[k]), which))
		}
	}
	figureText(t, "slow writes: survivors' own shards lost after the SIGKILL", strconv.Itoa(lostOwn),
		fmt.Sprintf("(goal 0; %d ShardLost events in all; held at the kill %d/%d)", lostEvents, len(own[0]), len(own[1])))
	if lostOwn > 0 {
		t.Errorf("the survivors lost %d of their own shards after the kill (%d ShardLost events): %s",
			lostOwn, lostEvents, strings.Join(lostWhich, "; "))
	}

	first, stable := coverage(shardChanges(after), len(survivors), killed)
	switch {
	case first.IsZero():
		figureText(t, "slow writes: SIGKILL → every shard held again", "not within "+slowRecoverTimeout.String(), "(LD + 2×RP = "+bound.String()+")")
		t.Errorf("within %s of the kill the survivors never held every shard at once", slowRecoverTimeout)
	default:
		figure(t, "slow writes: SIGKILL → every shard held again", first.Sub(killed), "(goal LD + 2×RP = "+bound.String()+")")
		if !stable.Equal(first) {
			if stable.IsZero() {
				figureText(t, "slow writes: SIGKILL → every shard held for good", "not within "+slowRecoverTimeout.String(), "(lost again)")
			} else {
				figure(t, "slow writes: SIGKILL → every shard held for good", stable.Sub(killed), "(lost again in between)")
			}
		}
		if first.Sub(killed) > bound {
			t.Errorf("every shard was held again %s after the kill, past LD + 2×RP = %s", first.Sub(killed).Round(time.Millisecond), bound)
		}
	}
	if p2 == nil {
		t.Errorf("the survivors did not settle within %s of the kill: %s", slowRecoverTimeout, why2)
	} else {
		figureText(t, "slow writes: shards per survivor, settled", p2.counts(survivors), "")
	}
	until := observed
	if !stable.IsZero() {
		until = stable
	}
	if until.Sub(killed) > time.Second {
		rate, breakdown = leaseRate(proxy.LeaseRequests(), killed, until)
		figureText(t, "slow writes: Lease requests/s, SIGKILL → all held", fmt.Sprintf("%.1f req/s", rate), "("+breakdown+")")
	}

	s.stopAll()
	gap := checkShardsNoOverlapBy(t, s.replicas, nil, slowShardOf)
	figure(t, "slow writes: closest two replicas' intervals of a shard came", gap, "(no overlap)")
}
