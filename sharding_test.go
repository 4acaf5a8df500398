package controllermanager_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8srecord "k8s.io/client-go/tools/record"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// Sharded leadership through the public API: R managers in this process
// over leasetest's in-memory API server (list, watch, 409 on stale
// versions), S shard Leases, one controller per shard (AddSharded) and one
// pinned by its name (Add), each journaled from Run to the return of its
// Shutdown. The timing is election_test.go's: lease 2s, renew deadline 1s,
// retry 100ms, so a lost shard is fenced within 720ms.
//
// Each scenario walks: start R replicas; a replica joins; one is cut off
// (its shards move to the others, it fences them) and comes back; a shard
// Lease is stolen; a replica leaves with ShutdownAndWait. After each step it
// waits for every shard to be held by exactly one live replica, with the
// shard's controllers running there, and checks balance (⌊S/R⌋ or ⌈S/R⌉
// shards each) and stickiness (what moved, moved only to a joiner or only
// from a leaver). At the end it checks, from the journals: no controller ever
// ran on two replicas at once, and on every replica the store had recovered
// before any controller ran and stayed up while one did.

// shReplica is one manager of a sharded scenario.
type shReplica struct {
	id     string
	m      *cm.ControllerManager
	client *leasetest.Client
	events *elEvents
	done   chan error // Start's result
	gone   bool       // shut down, or cut off, in the scenario
	log    *syncBuffer
}

type shScenario struct {
	t        *testing.T
	srv      *leasetest.Server
	shards   int
	activity *elActivity
	replicas []*shReplica
	// settledFrom is lossCounts() as the last settle began: the baseline
	// of the next step's movesReport. A shard lost just before a settle
	// returned may still show as held in that settle's assignment (its
	// controllers are being fenced), and move in the next step.
	settledFrom map[string]int
}

// movesReport is how a claim about which shards move is reported: failed,
// unless the test process stalled for more than half the renew deadline,
// or a replica lost a shard since before (lossCounts) that the step did
// not cause (caused: the losses the step causes on a replica, -1 for any
// number) because its renewals did not land within the deadline: a loaded
// machine can starve one replica's renewals without stalling the whole
// process, and a lost shard moves through no fault of the balancing.
func (s *shScenario) movesReport(before, caused map[string]int) func(format string, args ...any) {
	pause := s.activity.pauses.Longest()
	lost := 0
	for _, r := range s.replicas {
		n := r.events.losses() - before[r.id]
		if c, ok := caused[r.id]; ok {
			if c < 0 {
				continue
			}
			n -= c
		}
		lost += max(n, 0)
	}
	if pause > elRenewDeadline/2 || lost > 0 {
		return func(format string, args ...any) {
			s.t.Logf("excused, the test process stalled for %s or %d shards were lost: "+format, append([]any{pause, lost}, args...)...)
		}
	}
	return s.t.Errorf
}

// lossCounts is, per replica, its ShardLost and LeaderLost events so far.
func (s *shScenario) lossCounts() map[string]int {
	n := map[string]int{}
	for _, r := range s.replicas {
		n[r.id] = r.events.losses()
	}
	return n
}

// losses counts the ShardLost and LeaderLost events of every replica so
// far.
func (s *shScenario) losses() int {
	n := 0
	for _, r := range s.replicas {
		n += r.events.losses()
	}
	return n
}

func newShReplica(s *shScenario, id string) *shReplica {
	r := &shReplica{id: id, client: s.srv.Client(id), events: &elEvents{}}
	r.log = &syncBuffer{}
	r.start(s)
	s.replicas = append(s.replicas, r)
	return r
}

// start starts a manager for r: its first, or the next after one that
// ended (restartUnfenced). Its events and log go on from the last one's.
func (r *shReplica) start(s *shScenario) {
	t, id := s.t, r.id
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = int32(s.shards)
	logger := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Kubernetes Events go to a recorder that keeps none, not through
	// r.client: client-go's fake clientset holds one mutex across every
	// call it serves, and serves an Event's aggregation Patch with a
	// managed-fields tracker that builds a REST mapper each time (a third
	// of the process's CPU under -race). Each replica's Lease renewals
	// then queued behind its own ShardLost and ShardAcquired Events past
	// the renew deadline on a loaded machine, every loss bringing more:
	// scenarios churned for minutes, thousands of shards lost. No API
	// server serialises a client's requests so; this test is about the
	// Leases.
	m, err := cm.NewControllerManager(cm.NewContext(r.client), cm.ControllerManagerConfigSpec{LeaderElection: spec}, "",
		cm.WithIdentity(id), cm.WithLogger(logger), cm.WithEventRecorder(&k8srecord.FakeRecorder{}))
	require.NoError(t, err)
	r.m, r.done = m, make(chan error, 1)
	r.events.subscribe(m)
	m.AddStore(&elStore{c: elController{replica: id, name: "store", activity: s.activity}})
	m.AddSharded("ctl", func(sh cm.Shard) cm.Controller {
		return &elController{replica: id, name: fmt.Sprintf("ctl-%d", sh.Index), activity: s.activity}
	})
	m.Add(&elController{replica: id, name: "solo", activity: s.activity})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	done := r.done
	go func() { done <- m.Start(context.Background(), 0) }()
}

// unfenced reports whether err, why a manager stopped, is a lost lease
// whose controllers did not return from Shutdown within the fence timeout:
// the manager stops so that its host exits (docs/leader-election.md), the
// only fence left. The controllers here return at once; on a machine
// starved enough, the calls to and from them take longer.
func unfenced(err error) bool {
	return errors.Is(err, lease.ErrLost) && strings.Contains(err.Error(), "; not fenced: ")
}

// stopped reports whether r's manager has stopped.
func (r *shReplica) stopped() bool {
	select {
	case <-r.m.Done():
		return true
	default:
		return false
	}
}

// restartUnfenced does what a replica's host does when its manager stopped
// for a lease it could not fence in time: it exits, which ends the
// controllers still running, and starts again with the same identity. Here
// the controllers end on their own: a manager is started again once every
// controller and store of r has returned from Shutdown (one that never
// does keeps r down, and the settle fails). It reports how many it
// started. Whether the late ones ran beside another replica's is
// checkJournal's to say; a manager that stopped for any other reason is
// left stopped, and fails the settle.
func (s *shScenario) restartUnfenced() int {
	n := 0
	for _, r := range s.replicas {
		if !r.stopped() || !unfenced(r.m.Err()) || s.activity.active(r.id) > 0 {
			continue
		}
		s.t.Logf("%s: manager stopped, started again as its host would: %v", r.id, r.m.Err())
		r.start(s)
		n++
	}
	return n
}

func (s *shScenario) live() []*shReplica {
	var live []*shReplica
	for _, r := range s.replicas {
		if !r.gone {
			live = append(live, r)
		}
	}
	return live
}

// holders returns, from each live replica's Status, who holds each shard,
// or why the tree is not settled: a shard held by none or by two, or a
// controller of a held shard not running on its holder.
func (s *shScenario) holders() ([]string, error) {
	held := make([][]string, s.shards)
	running := map[string]map[string]bool{} // replica → running controllers
	for _, r := range s.live() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		st, err := r.m.Status(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: Status: %w", r.id, err)
		}
		running[r.id] = map[string]bool{}
		for _, c := range st.Children {
			if c.State == supervisor.StateRunning {
				running[r.id][c.Name] = true
			}
		}
		if s.shards == 1 {
			if len(st.Shards) != 0 {
				return nil, fmt.Errorf("%s: Status.Shards has %d entries with the single lease", r.id, len(st.Shards))
			}
			if st.Leader {
				held[0] = append(held[0], r.id)
			}
			continue
		}
		if len(st.Shards) != s.shards {
			return nil, fmt.Errorf("%s: Status.Shards has %d entries, want %d", r.id, len(st.Shards), s.shards)
		}
		for _, sh := range st.Shards {
			if sh.Held {
				held[sh.Index] = append(held[sh.Index], r.id)
			}
		}
	}
	out := make([]string, s.shards)
	for i, h := range held {
		if len(h) != 1 {
			return nil, fmt.Errorf("shard %d held by %v", i, h)
		}
		out[i] = h[0]
		if !running[h[0]][fmt.Sprintf("ctl-%d", i)] {
			return nil, fmt.Errorf("shard %d: ctl-%d not running on its holder %s", i, i, h[0])
		}
	}
	if solo := out[cm.ShardOf("solo", s.shards)]; !running[solo]["solo"] {
		return nil, fmt.Errorf("solo not running on %s, the holder of its shard %d", solo, cm.ShardOf("solo", s.shards))
	}
	return out, nil
}

// shSettleCap bounds a settle however many shards the machine makes the
// replicas lose meanwhile: a tree that churns for ever fails here, whatever
// it blames.
const shSettleCap = 5 * time.Minute

// settle waits until every shard is held once and its controllers run on
// its holder, then checks the balance among the live replicas. It fails if
// that has not held within 2·elWait of the later of its start and the last
// shard any replica lost, or within shSettleCap at all. A loaded machine
// that starves a replica's renewals costs it shards (rule 5 of
// docs/leader-election.md), which wait out their Leases and move again,
// for as long as it stays starved: what must not happen is 2·elWait with
// no loss, and no settling. On an idle machine nothing is lost, and the
// bound is the 2·elWait it was.
func (s *shScenario) settle(what string) []string {
	s.t.Helper()
	var got []string
	var last error
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	s.settledFrom = s.lossCounts()
	first, restarts := s.losses(), 0
	losses, lastLoss := first, began
	for {
		got, last = s.holders()
		if last == nil && s.balanced(got) {
			if losses != first {
				s.t.Logf("%s: settled in %s, %d shards lost and %d managers started again meanwhile", what,
					time.Since(began).Round(time.Millisecond), losses-first-restarts, restarts)
			} else {
				s.t.Logf("%s: settled in %s", what, time.Since(began).Round(time.Millisecond))
			}
			return got
		}
		restarts += s.restartUnfenced()
		if n := s.losses() + restarts; n != losses {
			losses, lastLoss = n, time.Now()
		}
		for _, r := range s.live() {
			if r.stopped() && !unfenced(r.m.Err()) {
				s.t.Fatalf("%s: %s's manager stopped: %v", what, r.id, r.m.Err())
			}
		}
		switch now := time.Now(); {
		case now.Sub(began) > shSettleCap:
			s.t.Fatalf("%s: not settled within %s (%d shards lost and %d managers started again meanwhile, the last %s ago): %v (holders %v); on the server at %s: %s",
				what, shSettleCap, losses-first-restarts, restarts, now.Sub(lastLoss).Round(time.Millisecond), last, got, now.Format("05.000"),
				s.serverLeases())
		case now.Sub(lastLoss) > 2*elWait:
			var down []string
			for _, r := range s.replicas {
				if r.stopped() && unfenced(r.m.Err()) {
					down = append(down, fmt.Sprintf("%s stopped unfenced, %d of its controllers still active", r.id, s.activity.active(r.id)))
				}
			}
			s.t.Fatalf("%s: not settled within %s of the last shard lost, or the start (%d lost in %s): %v (holders %v; %v); on the server at %s: %s",
				what, 2*elWait, losses-first-restarts, now.Sub(began).Round(time.Millisecond), last, got, down, now.Format("05.000"),
				s.serverLeases())
		}
		<-tick.C
	}
}

// balanced reports whether every live replica holds ⌊S/R⌋ or ⌈S/R⌉ shards.
func (s *shScenario) balanced(holders []string) bool {
	live := s.live()
	count := map[string]int{}
	for _, h := range holders {
		count[h]++
	}
	lo, hi := s.shards/len(live), (s.shards+len(live)-1)/len(live)
	for _, r := range live {
		if n := count[r.id]; n < lo || n > hi {
			return false
		}
	}
	return true
}

// moved returns the shards whose holder changed.
func moved(before, after []string) []int {
	var out []int
	for i := range before {
		if before[i] != after[i] {
			out = append(out, i)
		}
	}
	return out
}

// dumpIfFailed logs, when the test has failed, every replica's election
// events and its log, whichever step failed.
func (s *shScenario) dumpIfFailed() {
	t := s.t
	if !t.Failed() {
		return
	}
	for _, r := range s.replicas {
		var lines []string
		for _, e := range r.events.all() {
			switch e.Type {
			case cm.ShardAcquired, cm.ShardReleased, cm.ShardLost, cm.LeaderElected, cm.LeaderLost, cm.PhaseChanged:
				lines = append(lines, fmt.Sprintf("%s %s %d %s", e.Time.Format("05.000"), e.Type, e.Shard, e.Phase))
			}
		}
		t.Logf("%s events: %s", r.id, strings.Join(lines, "; "))
		t.Logf("%s log:\n%s", r.id, r.log)
	}
}

// leaseName is shard i's Lease: the single lease when there is one shard.
func (s *shScenario) leaseName(i int) string {
	if s.shards == 1 {
		return elLeaseName
	}
	return fmt.Sprintf("%s-%d", elLeaseName, i)
}

// serverLeases describes the server's shard Leases: holder and last
// renewal.
func (s *shScenario) serverLeases() string {
	var leases []string
	for i := range s.shards {
		name := s.leaseName(i)
		if l, ok := s.srv.Lease(elNamespace, name); ok && l.Spec.RenewTime != nil {
			leases = append(leases, fmt.Sprintf("%d: %q renewed %s", i, s.srv.Holder(elNamespace, name), l.Spec.RenewTime.Format("05.000")))
		}
	}
	return strings.Join(leases, "; ")
}

// checkJournal checks, over the whole scenario, that no controller ran on
// two replicas at once, and that on each replica every controller ran
// within a span of the store.
func (s *shScenario) checkJournal() {
	t := s.t
	spans := s.activity.snapshot()
	end := func(sp elSpan) time.Time {
		if sp.to.IsZero() {
			return time.Now().Add(time.Hour)
		}
		return sp.to
	}
	byChild := map[string][]elSpan{}
	stores := map[string][]elSpan{}
	for _, sp := range spans {
		if sp.child == "store" {
			stores[sp.replica] = append(stores[sp.replica], sp)
			continue
		}
		byChild[sp.child] = append(byChild[sp.child], sp)
	}
	pause := s.activity.pauses.Longest()
	report := t.Errorf
	if pause > elFenceBudget/2 {
		// As in election_test.go: a pause of the whole process stops the
		// holder and delays the others alike, the paused-process limit no
		// lease can fence.
		t.Logf("the test process was paused for %s (fence budget %s): overlaps are logged, not failed", pause, elFenceBudget)
		report = t.Logf
	}
	for child, list := range byChild {
		for i, x := range list {
			for _, y := range list[i+1:] {
				if x.replica != y.replica && x.from.Before(end(y)) && y.from.Before(end(x)) {
					report("%s ran on %s (%s–%s) and on %s (%s–%s) at once", child, x.replica, x.from.Format("05.000"),
						end(x).Format("05.000"), y.replica, y.from.Format("05.000"), end(y).Format("05.000"))
				}
			}
			// The shutdown stops a replica's children in parallel: the
			// store may stop before a controller has; it must have
			// recovered before any started.
			// A Run the supervisor asked for just before a shutdown or a
			// stand-down stopped the store may begin after the store's
			// Shutdown has returned (the two actors run in parallel): the
			// store's last span must have begun before the controller,
			// and ended after it began or just before (slack, plus any
			// pause of the process).
			var last *elSpan
			for k, st := range stores[x.replica] {
				if !st.from.After(x.from) && (last == nil || st.from.After(last.from)) {
					last = &stores[x.replica][k]
				}
			}
			inStore := last != nil && end(*last).Add(100*time.Millisecond+pause).After(x.from)
			if !inStore {
				var spans []string
				for _, st := range stores[x.replica] {
					spans = append(spans, st.from.Format("05.000")+"–"+end(st).Format("05.000"))
				}
				t.Errorf("%s started on %s at %s, when its store was not recovered (store spans %v)", child, x.replica,
					x.from.Format("05.000"), spans)
			}
		}
	}
}

// shardingFull runs the partition and steal steps for every R × S, not
// only for the four pairs that cover each R and S once (each costs a few
// seconds of lease expiry).
var shardingFull = flag.Bool("sharding.full", false, "TestShardedReplicas: cut off and steal for every replicas × shards pair")

func TestShardedReplicas(t *testing.T) {
	faults := map[[2]int]bool{{1, 32}: true, {2, 4}: true, {3, 12}: true, {5, 12}: true}
	// The scenarios mostly wait for Leases to change hands: they run side
	// by side, more of them than -parallel (GOMAXPROCS) would allow, each
	// subtest started from a goroutine of its own (t.Run allows that).
	var wg sync.WaitGroup
	slots := make(chan struct{}, 4)
	for _, replicas := range []int{1, 2, 3, 5} {
		for _, shards := range []int{1, 4, 12, 32} {
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				t.Run(fmt.Sprintf("R=%d/S=%d", replicas, shards), func(t *testing.T) {
					runShardScenario(t, replicas, shards, *shardingFull || faults[[2]int{replicas, shards}])
				})
			})
		}
	}
	wg.Wait()
}

func runShardScenario(t *testing.T, replicas, shards int, faults bool) {
	s := &shScenario{t: t, srv: leasetest.NewServer(), shards: shards, activity: newElActivity(t)}
	t.Cleanup(s.dumpIfFailed) // after the replicas' shutdowns, registered later
	for i := range replicas {
		newShReplica(s, fmt.Sprintf("r%d", i))
	}
	a1 := s.settle("start")

	// A join moves shards only to the joiner, at most ⌈S/R⌉ of them.
	lostBefore := s.settledFrom
	joiner := newShReplica(s, fmt.Sprintf("r%d", replicas))
	a2 := s.settle("join")
	// Which shards move is a claim about renewals: a stall of the whole test
	// process past half the renew deadline (a loaded machine) may cost a
	// replica a shard it would have kept, which the faults step shows is
	// then taken over safely. Such a run logs the moves instead of failing.
	report := s.movesReport(lostBefore, nil)
	for _, i := range moved(a1, a2) {
		if a2[i] != joiner.id {
			report("join: shard %d moved from %s to %s, not to the joiner", i, a1[i], a2[i])
		}
	}
	if n, most := len(moved(a1, a2)), (shards+replicas)/(replicas+1); n > most {
		report("join: %d shards moved, at most %d expected", n, most)
	}

	a5 := a2
	if faults {
		a5 = s.faults(a2)
	}

	// A replica leaving with ShutdownAndWait hands its shards over once
	// their controllers have stopped; only its shards move.
	leaver := s.replicas[len(s.replicas)-1]
	releasedBefore := leaver.events.count(cm.ShardReleased)
	lostBefore = s.settledFrom
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	leaver.m.ShutdownAndWait(ctx)
	cancel()
	require.NoError(t, leaver.m.Err())
	leaver.gone = true
	a6 := s.settle("leave")
	report = s.movesReport(lostBefore, nil)
	for _, i := range moved(a5, a6) {
		if a5[i] != leaver.id {
			report("leave: shard %d moved from %s, not from the leaver", i, a5[i])
		}
	}
	if shards > 1 {
		if n, want := len(moved(a5, a6)), countOf(a5, leaver.id); n != want {
			report("leave: %d shards moved, the leaver held %d", n, want)
		}
		if want, got := countOf(a5, leaver.id), leaver.events.count(cm.ShardReleased)-releasedBefore; got != want {
			// A shard whose renewal missed during a stall is lost, not released.
			report("leave: %d ShardReleased events of the leaver, it held %d", got, want)
		}
	}

	for _, r := range s.replicas {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		r.m.ShutdownAndWait(ctx)
		cancel()
		assert.NoError(t, r.m.Err(), "%s", r.id)
	}
	s.checkJournal()
	t.Logf("assignments: start %s | join %s | after the faults %s | leave %s",
		strings.Join(a1, ","), strings.Join(a2, ","), strings.Join(a5, ","), strings.Join(a6, ","))
}

func countOf(holders []string, id string) int {
	n := 0
	for _, h := range holders {
		if h == id {
			n++
		}
	}
	return n
}

// faults cuts a replica off and heals it, then steals shard 0's Lease,
// settling after each; it returns the assignment at the end.
func (s *shScenario) faults(a2 []string) []string {
	t, shards := s.t, s.shards
	// A replica cut off from the API server fences its shards; the others
	// take them over, and only them, once their Leases have expired.
	// Which shards move is reported as in the join (runShardScenario): a
	// loss on a replica that was not cut off is a starved renewal.
	cut := s.replicas[0]
	lostBefore := s.settledFrom
	cut.client.Partition(true)
	cut.gone = true
	a3 := s.settle("partition")
	report := s.movesReport(lostBefore, map[string]int{cut.id: -1})
	for _, i := range moved(a2, a3) {
		if a2[i] != cut.id {
			report("partition: shard %d moved from %s, not from the replica cut off", i, a2[i])
		}
	}
	// It campaigns again once it can reach the server.
	lostBefore = s.settledFrom
	cut.client.Partition(false)
	cut.gone = false
	a4 := s.settle("heal")
	report = s.movesReport(lostBefore, map[string]int{cut.id: -1}) // its losses while cut off may come late
	for _, i := range moved(a3, a4) {
		if a4[i] != cut.id {
			report("heal: shard %d moved from %s to %s, not to the returning replica", i, a3[i], a4[i])
		}
	}
	// A stolen shard Lease is fenced on its holder and taken back once the
	// thief's lease has expired.
	victim := a4[0]
	lostType := cm.ShardLost
	if shards == 1 {
		lostType = cm.LeaderLost
	}
	// The victim is often the replica cut off above, which has lost shards
	// already: wait for a loss after those, or settle would read its Status
	// from before it noticed the theft (and a5 would name it as shard 0's
	// holder still).
	theftBefore := map[string]int{}
	for _, r := range s.replicas {
		theftBefore[r.id] = r.events.count(lostType)
	}
	lostBefore = s.settledFrom
	require.NoError(t, s.srv.Steal(elNamespace, s.leaseName(0), "thief", elLeaseDuration))
	for _, r := range s.replicas {
		if r.id == victim {
			r.events.nth(t, lostType, theftBefore[r.id]+1)
		}
	}
	a5 := s.settle("steal")
	report = s.movesReport(lostBefore, map[string]int{victim: 1})
	if shards > 1 {
		for _, i := range moved(a4, a5) {
			if i != 0 {
				report("steal: shard %d moved (%s → %s); only shard 0 was stolen", i, a4[i], a5[i])
			}
		}
	}
	return a5
}
