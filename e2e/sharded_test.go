package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/shard"
)

// shardCount is S, the number of shard Leases of the sharded scenarios.
const shardCount = 12

// shardedFlags are the flags of every replica of TestShardedReplicaProcesses.
var shardedFlags = []string{"--shards=" + strconv.Itoa(shardCount), "--on-lease-lost=Reelect"}

// shardedControllers are the 36 controllers the replica program runs with --shards=12
// (internal/cmd/replica/sharded.go): "ticker-<i>" and "informer-<i>" added with
// AddSharded, and twelve "plain-NN" added with Add.
func shardedControllers() []string {
	var names []string
	for i := range shardCount {
		names = append(names, fmt.Sprintf("ticker-%d", i), fmt.Sprintf("informer-%d", i))
	}
	for i := range 12 {
		names = append(names, fmt.Sprintf("plain-%02d", i))
	}
	return names
}

// shardOfController is the shard the manager must pin a controller to: i for the
// children AddSharded names "<name>-<i>", ShardOf(name, S) for one added with Add.
func shardOfController(name string) int {
	for _, family := range []string{"ticker-", "informer-"} {
		if rest, ok := strings.CutPrefix(name, family); ok {
			if i, err := strconv.Atoi(rest); err == nil {
				return i
			}
		}
	}
	return cm.ShardOf(name, shardCount)
}

// controllersOfShard lists the controllers pinned to each shard.
func controllersOfShard() [][]string {
	of := make([][]string, shardCount)
	for _, name := range shardedControllers() {
		i := shardOfController(name)
		of[i] = append(of[i], name)
	}
	return of
}

// shardView is where one replica stands at the end of its journal.
type shardView struct {
	held     map[int]bool               // acquired (ShardAcquired) and not since released or lost
	states   map[string]controllerState // each controller's last state
	observed map[int]string             // each shard's holder as it last observed it
	children map[int][]string           // each shard's children, as its status listed them
}

func viewOf(entries []journal.Entry) shardView {
	v := shardView{held: map[int]bool{}, states: controllerStates(entries), observed: map[int]string{}, children: map[int][]string{}}
	for _, e := range entries {
		switch {
		case e.Kind == journal.Supervision && e.Type == "ShardAcquired":
			v.held[e.Shard] = true
		case e.Kind == journal.Supervision && (e.Type == "ShardReleased" || e.Type == "ShardLost"):
			delete(v.held, e.Shard)
		case e.Kind == journal.ShardHolder:
			v.observed[e.Shard] = e.Leader
			if e.Children != nil {
				v.children[e.Shard] = e.Children
			}
		}
	}
	return v
}

// active reports whether a controller in state st may be doing work: Run called and
// Shutdown not returned.
func active(st controllerState) bool {
	return st.kind != "" && st.kind != journal.Stopped
}

// placement is which replica holds (and runs) each shard.
type placement []*replica

// counts renders how many shards each of rs holds, in the order of rs.
func (p placement) counts(rs []*replica) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, strconv.Itoa(p.count(r)))
	}
	return strings.Join(parts, "/")
}

func (p placement) count(r *replica) int {
	n := 0
	for _, h := range p {
		if h == r {
			n++
		}
	}
	return n
}

func (p placement) of(r *replica) []int {
	var shards []int
	for i, h := range p {
		if h == r {
			shards = append(shards, i)
		}
	}
	return shards
}

// settled reports whether live (every replica that is running) have settled: each
// shard is held by exactly one of them, which runs all its controllers, while no other
// runs any; every one of them observes that holder; and each holds ⌊S/R⌋ or ⌈S/R⌉.
// When not, why says what is missing.
func settled(live []*replica, all [][]journal.Entry) (p placement, why string) {
	views := make([]shardView, len(live))
	for i := range live {
		views[i] = viewOf(all[i])
	}
	of := controllersOfShard()
	p = make(placement, shardCount)
	for i := range shardCount {
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
	low := shardCount / len(live)
	high := (shardCount + len(live) - 1) / len(live)
	for _, r := range live {
		if n := p.count(r); n < low || n > high {
			return nil, fmt.Sprintf("unbalanced: %s holds %d shards (%s)", r.id, n, p.counts(live))
		}
	}
	return p, ""
}

// waitSettled waits until live have settled and returns the placement, cross-checked
// against the Leases themselves: each shard Lease names its holder, and each live
// replica renews its member Lease.
func waitSettled(t *testing.T, what string, timeout time.Duration, live []*replica, leases *shardLeaseWatch) placement {
	t.Helper()
	var p placement
	why := ""
	defer func() {
		if p == nil { // waitFor gave up
			t.Logf("%s: not settled: %s", what, why)
		}
	}()
	waitFor(t, what, timeout, live, func(all [][]journal.Entry) bool {
		p, why = settled(live, all)
		return p != nil
	})
	require.Eventually(t, func() bool {
		for i, h := range p {
			if leases.last(shard.ShardLease(leases.group, i)).holder != h.id {
				return false
			}
		}
		for _, r := range live {
			if leases.last(shard.MemberLease(leases.group, r.id)).holder != r.id {
				return false
			}
		}
		return true
	}, 10*time.Second, pollInterval, "%s: the Leases do not show the placement the journals show", what)
	return p
}

// settledAt is when shards were all running where placement p has them: the latest
// Running of their controllers' current incarnations, each after since.
func settledAt(t *testing.T, p placement, shards []int, since time.Time) time.Time {
	t.Helper()
	of := controllersOfShard()
	var at time.Time
	for _, i := range shards {
		states := controllerStates(p[i].entries(t))
		for _, name := range of[i] {
			st := states[name]
			require.True(t, st.kind == journal.Running && !st.at.Before(since),
				"shard %d: %s was not started on %s after %s (%q at %s)", i, name, p[i].id, since.Format(stamp), st.kind, st.at.Format(stamp))
			at = later(at, st.at)
		}
	}
	return at
}

// stoppedAfter is when all the controllers of shard i had stopped on r, each for the
// first time after since; false while one has not.
func stoppedAfter(entries []journal.Entry, i int, since time.Time) (time.Time, bool) {
	var at time.Time
	for _, name := range controllersOfShard()[i] {
		e, ok := firstAfter(entries, since, func(e journal.Entry) bool { return e.Kind == journal.Stopped && e.Controller == name })
		if !ok {
			return time.Time{}, false
		}
		at = later(at, e.At())
	}
	return at, true
}

// givenUpAfter is the first ShardLost or ShardReleased of shard i after since.
func givenUpAfter(entries []journal.Entry, i int, since time.Time) (journal.Entry, bool) {
	return firstAfter(entries, since, func(e journal.Entry) bool {
		return e.Kind == journal.Supervision && (e.Type == "ShardLost" || e.Type == "ShardReleased") && e.Shard == i
	})
}

// shardEventAfter is the first supervision event typ about shard i in r's journal
// after since.
func shardEventAfter(t *testing.T, r *replica, typ string, i int, since time.Time) (journal.Entry, bool) {
	t.Helper()
	return firstAfter(r.entries(t), since, func(e journal.Entry) bool {
		return e.Kind == journal.Supervision && e.Type == typ && e.Shard == i
	})
}

// requireSticky checks what a change of membership moved from before to after:
// exactly the shards of moved (nil: any), each to a replica of to (nil: any), and that
// nothing else changed hands, on the Leases too (each shard Lease changed holder at
// most once in between). It returns how many shards changed hands.
func requireSticky(t *testing.T, leases *shardLeaseWatch, before, after placement, from, until time.Time, moved []int, to []*replica) int {
	t.Helper()
	var changed []int
	for i := range shardCount {
		if before[i] != after[i] {
			changed = append(changed, i)
			if to != nil {
				require.Contains(t, to, after[i], "shard %d moved from %s to %s", i, before[i].id, after[i].id)
			}
		}
	}
	if moved != nil {
		require.Equal(t, moved, changed, "the shards that changed hands (before %s, after %s)", before.ids(), after.ids())
	}
	for i := range shardCount {
		n := leases.moves(shard.ShardLease(leases.group, i), from, until)
		want := 0
		if slices.Contains(changed, i) {
			want = 1
		}
		require.Equal(t, want, n, "shard %d changed holder %d times on its Lease between %s and %s: %+v", i, n,
			from.Format(stamp), until.Format(stamp), leases.records(shard.ShardLease(leases.group, i)))
	}
	return len(changed)
}

func (p placement) ids() []string {
	ids := make([]string, len(p))
	for i, r := range p {
		ids[i] = r.id
	}
	return ids
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestShardedReplicaProcesses runs replicas of the program with S = 12 shard Leases and 36
// controllers against the real API server, and takes them through a life: a steady
// state; a SIGKILL; the killed replica started again (a join); a SIGTERM; another join;
// a SIGSTOP of a shard's holder, then SIGCONT; the API server paused. In every phase
// every shard ends up held by one replica, which runs its controllers, balanced and
// observed alike by all; at the end, no two replicas' controllers of one shard were
// ever active at once (checked per shard from the journals, as the single-Lease tests
// check the whole), except where a SIGSTOPped replica cannot be fenced (see sigstop).
//
// The subtests share one control plane and continue each other; the first to fail
// ends the test.
func TestShardedReplicaProcesses(t *testing.T) {
	s := newScenario(t)
	api := s.cluster.APIServer()
	// Registered after the cluster's own cleanup, so that it runs first.
	t.Cleanup(func() { _ = api.Signal(syscall.SIGCONT) })
	client := s.cluster.Clientset()
	leases := watchShardLeases(t, client, s.namespace, s.leaseName)
	// solo runs alone on a group of its own with --on-lease-lost=Exit, for the pause.
	soloLeases := watchShardLeases(t, client, s.namespace, "solo")
	frozen := map[*replica]frozenWindow{} // a SIGSTOPped replica's pause
	var p placement
	var live []*replica
	var solo *replica

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"steady", func(t *testing.T) {
			started := time.Now()
			live = []*replica{
				s.start("replica-a", shardedFlags...),
				s.start("replica-b", shardedFlags...),
				s.start("replica-c", shardedFlags...),
			}
			solo = s.start("solo", "--lease-name=solo", "--shards="+strconv.Itoa(shardCount), "--on-lease-lost=Exit")
			p = waitSettled(t, "three replicas settled", startupTimeout, live, leases)
			figure(t, "sharded: start → every shard running, settled", settledAt(t, p, allShards(), started).Sub(started), "(3 processes, -race)")
			figureText(t, "sharded: shards per replica, settled, R = 3", p.counts(live), "(S = 12)")
			of := controllersOfShard()
			for _, r := range live {
				v := viewOf(r.entries(t))
				for i := range shardCount {
					require.ElementsMatch(t, of[i], v.children[i], "%s: Status.Shards[%d].Children", r.id, i)
				}
			}
			waitSettled(t, "the solo replica holding every shard of its group", startupTimeout, []*replica{solo}, soloLeases)
		}},
		{"sigkill", func(t *testing.T) {
			victim := live[2]
			before := p
			shards := before.of(victim)
			killed := victim.kill(t)
			live = slices.DeleteFunc(slices.Clone(live), func(r *replica) bool { return r == victim })
			// The survivors take a shard over once its Lease and the victim's member Lease
			// have gone LeaseDuration unchanged by their clocks, at a retry: the last
			// renewal was at most a retry period before the kill.
			bound := leaseDuration + 2*retryPeriod
			p = waitSettled(t, "the survivors running the killed replica's shards", bound+activationSlack+requestSlack, live, leases)
			var acquired time.Time
			for _, i := range shards {
				e, ok := shardEventAfter(t, p[i], "ShardAcquired", i, killed)
				require.True(t, ok, "shard %d: no ShardAcquired on %s after the kill", i, p[i].id)
				acquired = later(acquired, e.At())
			}
			running := settledAt(t, p, shards, killed)
			figure(t, "sharded: SIGKILL → its shards acquired elsewhere", acquired.Sub(killed), "(LD + 2×RP = "+bound.String()+")")
			figure(t, "sharded: SIGKILL → its shards running elsewhere", running.Sub(killed), "")
			require.Less(t, acquired.Sub(killed), bound+requestSlack, "the killed replica's shards were taken over late")
			moved := requireSticky(t, leases, before, p, killed, time.Now(), shards, live)
			figureText(t, "sharded: shards moved on a leave (SIGKILL)", strconv.Itoa(moved), "(R = 3 → 2; the leaver's)")
			figureText(t, "sharded: shards per replica, settled, R = 2", p.counts(live), "(S = 12)")
		}},
		{"restart", func(t *testing.T) {
			// The same identity, as a StatefulSet's pod comes back, with a journal of its own.
			joiner := s.startAgain("replica-c", shardedFlags...)
			s.join(t, leases, &p, &live, joiner, "the killed replica started again")
		}},
		{"sigterm", func(t *testing.T) {
			victim := live[0]
			before := p
			shards := before.of(victim)
			signalled := time.Now()
			require.NoError(t, victim.proc.Stop(30*time.Second), "%s must exit 0 after SIGTERM", victim.id)
			live = slices.DeleteFunc(slices.Clone(live), func(r *replica) bool { return r == victim })
			p = waitSettled(t, "the others running the SIGTERMed replica's shards", 2*maxRetryGap+activationSlack, live, leases)
			entries := victim.entries(t)
			// From the journal: the race detector holds a process for a second at exit.
			returned, ok := firstAfter(entries, signalled, func(e journal.Entry) bool { return e.Kind == journal.ShutdownReturned })
			require.True(t, ok, "%s exited without ShutdownAndWait returning", victim.id)
			figure(t, "sharded: SIGTERM → ShutdownAndWait returned", returned.At().Sub(signalled), "(every shard released)")
			for _, i := range shards {
				stopped, ok := stoppedAfter(entries, i, signalled)
				require.True(t, ok, "shard %d: a controller not stopped on %s", i, victim.id)
				lease := shard.ShardLease(leases.group, i)
				released, acquired := leases.handover(t, lease, victim.id, signalled)
				require.False(t, released.renewed.Before(stopped.Truncate(time.Microsecond)),
					"shard %d was released at %s, before its last controller stopped at %s", i, released.renewed.Format(stamp), stopped.Format(stamp))
				require.Equal(t, p[i].id, acquired.holder, "shard %d", i)
				running := settledAt(t, p, []int{i}, signalled)
				figure(t, "sharded: SIGTERM: controllers stopped → shard released", released.renewed.Sub(stopped), "")
				figure(t, "sharded: SIGTERM: shard released → acquired elsewhere", acquired.renewed.Sub(released.renewed), "(from the Lease's versions)")
				figure(t, "sharded: SIGTERM: shard released → running elsewhere", running.Sub(released.renewed), "")
				require.Less(t, acquired.renewed.Sub(released.renewed), retryPeriod, "shard %d was taken over at a retry, not on the watch", i)
			}
			requireReleasedMember(t, leases, victim.id)
			moved := requireSticky(t, leases, before, p, signalled, time.Now(), shards, live)
			figureText(t, "sharded: shards moved on a leave (SIGTERM)", strconv.Itoa(moved), "(R = 3 → 2; the leaver's)")
		}},
		{"join", func(t *testing.T) {
			s.join(t, leases, &p, &live, s.start("replica-d", shardedFlags...), "a new replica")
		}},
		{"sigstop", func(t *testing.T) {
			victim := p[0]
			before := p
			shards := before.of(victim)
			// Resumed at the latest when the test ends, so that it can be stopped.
			t.Cleanup(func() { _ = victim.proc.Signal(syscall.SIGCONT) })
			stopped := time.Now()
			sendSignal(t, victim.proc, syscall.SIGSTOP)
			others := slices.DeleteFunc(slices.Clone(live), func(r *replica) bool { return r == victim })
			bound := leaseDuration + 2*retryPeriod
			p = waitSettled(t, "the others running the paused replica's shards", bound+activationSlack+requestSlack, others, leases)
			running := settledAt(t, p, shards, stopped)
			figure(t, "sharded: SIGSTOP → its shards running elsewhere", running.Sub(stopped), "")
			for _, i := range shards {
				lease := shard.ShardLease(leases.group, i)
				last, ok := leases.lastRenewalBy(lease, victim.id, stopped)
				require.True(t, ok, "shard %d: no renewal by %s before the SIGSTOP", i, victim.id)
				taken, ok := leases.firstHolderAfter(lease, p[i].id, last.renewed)
				require.True(t, ok, "shard %d: no version naming %s", i, p[i].id)
				require.False(t, taken.renewed.Before(last.expires()), "shard %d was taken by %s at %s, before the paused holder's lease expired at %s",
					i, p[i].id, taken.renewed.Format(stamp), last.expires().Format(stamp))
			}
			requireSticky(t, leases, before, p, stopped, time.Now(), shards, others)

			resumed := time.Now()
			sendSignal(t, victim.proc, syscall.SIGCONT)
			frozen[victim] = frozenWindow{stopped, resumed}
			// Woken, it finds its shards taken: it reports each lost and stops its
			// controllers. Until then they run beside the new holders': nothing inside a
			// frozen process can fence it; only a guard at the write can (see
			// TestWriteFenceWhileLeaderPaused).
			all := waitFor(t, victim.id+" fencing after SIGCONT", leaseDuration+activationSlack, []*replica{victim}, func(all [][]journal.Entry) bool {
				for _, i := range shards {
					_, given := givenUpAfter(all[0], i, resumed)
					_, stopped := stoppedAfter(all[0], i, resumed)
					if !given || !stopped {
						return false
					}
				}
				return true
			})
			var fenced time.Time
			for _, i := range shards {
				e, _ := givenUpAfter(all[0], i, resumed)
				require.Equal(t, "ShardLost", e.Type, "shard %d, taken while %s was paused: given up as", i, victim.id)
				at, _ := stoppedAfter(all[0], i, resumed)
				fenced = later(fenced, at)
			}
			figure(t, "sharded: SIGCONT → the paused replica's controllers stopped", fenced.Sub(resumed), "(active beside the new holders' meanwhile)")
			requireNoRestart(t, victim)
			// With Reelect it rejoins.
			before = p
			p = waitSettled(t, "the resumed replica rejoined", startupTimeout, live, leases)
			figure(t, "sharded: SIGCONT → settled again, rejoined", settledAt(t, p, p.of(victim), resumed).Sub(resumed), "")
			// The join's moves are counted from the SIGCONT, not from the last
			// shard fenced: a shard whose controllers have stopped may be handed
			// back to the resumed replica while another still stops (seen in
			// CI: shard 0 back 4 ms before the last fence). Nothing else writes
			// a holder in between: its shards were taken before it resumed.
			figureText(t, "sharded: shards moved on a join", strconv.Itoa(requireSticky(t, leases, before, p, resumed, time.Now(), nil, []*replica{victim})), "(R = 2 → 3; ⌊S/R⌋ = 4)")
			figureText(t, "sharded: shards per replica, settled, R = 3", p.counts(live), "(S = 12)")
		}},
		{"apiserver-paused", func(t *testing.T) {
			everyone := append(slices.Clone(live), solo)
			groups := map[*replica]*shardLeaseWatch{solo: soloLeases}
			for _, r := range live {
				groups[r] = leases
			}
			held := map[*replica][]int{solo: allShards()}
			for _, r := range live {
				held[r] = p.of(r)
			}
			select {
			case <-solo.proc.Done():
				t.Fatalf("the solo replica exited before the API server was paused: %v; journal:\n%s", solo.proc.ExitErr(), describe([]*replica{solo}, [][]journal.Entry{solo.entries(t)}))
			default:
			}
			paused := time.Now()
			sendSignal(t, api, syscall.SIGSTOP)
			// A holder gives a shard up RenewDeadline after its last renewal, at its next
			// renewal, at most RetryPeriod + RenewDeadline after it; its controllers then
			// have the fence timeout. Waited for much longer, so that a late one fails
			// below, precisely. The solo replica, with Exit, stops every shard once it
			// has lost one, whatever it reports for the others.
			fenceBound := retryPeriod + renewDeadline + fenceTimeout
			waitFor(t, "every replica fencing every shard", 4*fenceBound, everyone, func(all [][]journal.Entry) bool {
				for k, r := range everyone {
					for _, i := range held[r] {
						_, given := givenUpAfter(all[k], i, paused)
						_, stopped := stoppedAfter(all[k], i, paused)
						if (!given && r != solo) || !stopped {
							return false
						}
					}
				}
				return true
			})
			resumed := time.Now()
			sendSignal(t, api, syscall.SIGCONT)
			// The replicas write again after the resume; the solo one has exited, perhaps
			// before. Then the watches must have recorded what a list shows: every
			// version written before, the renewals whose answers the freeze swallowed
			// included.
			requireGroupVersionAfter(t, leases, resumed)
			requireExitedLost(t, solo)
			requireCaughtUp(t, client, s.namespace, leases)
			requireCaughtUp(t, client, s.namespace, soloLeases)
			// Per shard, as TestFencingWhileAPIServerPaused checks the single Lease: its
			// controllers stopped before the last version of its Lease written before the
			// loss could expire. With Reelect each shard is lost on its own.
			var lastLoss, worstLoss, worstFence, leastMargin time.Duration
			leastMargin = leaseDuration
			for _, r := range everyone {
				entries := r.entries(t)
				lost := 0
				for _, i := range held[r] {
					fenced, _ := stoppedAfter(entries, i, paused)
					given, ok := givenUpAfter(entries, i, paused)
					if r != solo {
						require.Equal(t, "ShardLost", given.Type, "%s: shard %d, not renewable while the API server was paused: given up as", r.id, i)
					}
					givenAt := fenced // the solo replica may report nothing for a shard it stopped
					if ok {
						givenAt = given.At()
					}
					lease := shard.ShardLease(groups[r].group, i)
					last, ok := groups[r].lastRenewalBy(lease, r.id, givenAt)
					require.True(t, ok, "%s: shard %d: no renewal before it was given up", r.id, i)
					if given.Type == "ShardLost" {
						lost++
					}
					// The solo replica's later losses come after its manager has stopped
					// every shard: only when they were fenced matters.
					if given.Type == "ShardLost" && r != solo {
						lastLoss = max(lastLoss, given.At().Sub(paused))
						assert.Less(t, given.At().Sub(last.renewed), retryPeriod+renewDeadline+requestSlack,
							"%s: shard %d lost %s after its last renewal", r.id, i, given.At().Sub(last.renewed))
						worstLoss = max(worstLoss, given.At().Sub(last.renewed))
						worstFence = max(worstFence, fenced.Sub(given.At()))
						assert.Less(t, fenced.Sub(given.At()), fenceTimeout, "%s: shard %d not fenced within the fence timeout", r.id, i)
					}
					leastMargin = min(leastMargin, last.expires().Sub(fenced))
					assert.True(t, fenced.Before(last.expires()), "%s: shard %d fenced at %s, after its lease expired at %s (renewed %s, given up %s at %s)",
						r.id, i, fenced.Format(stamp), last.expires().Format(stamp), last.renewed.Format(stamp), given.Type, givenAt.Format(stamp))
				}
				require.Positive(t, lost, "%s lost no shard while the API server was paused", r.id)
			}
			figure(t, "sharded: pause: paused → the last ShardLost", lastLoss, "(3 replicas, 12 shards)")
			figure(t, "sharded: pause: last renewal → ShardLost, worst shard", worstLoss, "(RP + RD = "+(retryPeriod+renewDeadline).String()+")")
			figure(t, "sharded: pause: ShardLost → its controllers stopped, worst", worstFence, "(fence timeout "+fenceTimeout.String()+")")
			figure(t, "sharded: pause: margin, stopped → lease expiry, least", leastMargin, "(fence budget "+(leaseDuration-renewDeadline-retryPeriod).String()+"; 4 replicas, 24 shards)")
			p = waitSettled(t, "the replicas settled after the resume", startupTimeout, live, leases)
			figure(t, "sharded: pause: API server resumed → every shard running", settledAt(t, p, allShards(), resumed).Sub(resumed), "")
			for _, r := range live {
				requireNoRestart(t, r)
			}
		}},
	}
	for k, step := range steps {
		// A failed step ends the test, but for the last: the checks of the whole still
		// run after it.
		if !t.Run(step.name, step.run) && k < len(steps)-1 {
			return
		}
	}
	s.stopAll()
	// The solo replica is a group of its own, alone in it.
	group := slices.DeleteFunc(slices.Clone(s.replicas), func(r *replica) bool { return r == solo })
	gap := checkShardsNoOverlap(t, group, frozen)
	figure(t, "sharded: closest two replicas' intervals of a shard came", gap, "(no overlap)")
}

// join starts joiner beside live and checks the join: at most ⌈S/R⌉ shards move, all
// to the joiner, nothing else changes hands.
func (s *scenario) join(t *testing.T, leases *shardLeaseWatch, p *placement, live *[]*replica, joiner *replica, what string) {
	t.Helper()
	before := *p
	started := time.Now()
	*live = append(slices.Clone(*live), joiner)
	*p = waitSettled(t, what+" settled", startupTimeout, *live, leases)
	moved := requireSticky(t, leases, before, *p, started, time.Now(), nil, []*replica{joiner})
	require.LessOrEqual(t, moved, (shardCount+len(*live)-1)/len(*live), "a join moved more than ⌈S/R⌉ shards")
	figure(t, "sharded: join: started → settled", settledAt(t, *p, p.of(joiner), started).Sub(started), "(a process starting, -race)")
	figureText(t, "sharded: shards moved on a join", strconv.Itoa(moved), "(R = 2 → 3; ⌊S/R⌋ = 4)")
	figureText(t, "sharded: shards per replica, settled, R = "+strconv.Itoa(len(*live)), p.counts(*live), "(S = 12)")
}

// startAgain starts a second process with the identity of an earlier replica, with a
// journal of its own, so that each process's intervals stay apart.
func (s *scenario) startAgain(id string, extra ...string) *replica {
	s.t.Helper()
	n := 1
	for _, r := range s.replicas {
		if r.id == id {
			n++
		}
	}
	path := filepath.Join(s.dir, fmt.Sprintf("%s.%d.jsonl", id, n))
	r := s.start(id, append(slices.Clone(extra), "--journal="+path)...)
	r.journal = path // the later --journal wins
	return r
}

func allShards() []int {
	shards := make([]int, shardCount)
	for i := range shards {
		shards[i] = i
	}
	return shards
}

// requireReleasedMember checks that a replica stopped with SIGTERM emptied its member
// Lease.
func requireReleasedMember(t *testing.T, leases *shardLeaseWatch, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return leases.last(shard.MemberLease(leases.group, id)).holder == ""
	}, 10*time.Second, pollInterval, "%s did not release its member Lease", id)
}

// requireExitedLost checks that a replica with --on-lease-lost=Exit exited 1 with an
// error wrapping lease.ErrLost.
func requireExitedLost(t *testing.T, r *replica) {
	t.Helper()
	select {
	case <-r.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s, with --on-lease-lost=Exit, did not exit after losing its shards", r.id)
	}
	var exitErr *exec.ExitError
	require.True(t, errors.As(r.proc.ExitErr(), &exitErr), "want exit status 1, have %v", r.proc.ExitErr())
	require.Equal(t, 1, exitErr.ExitCode())
	entries := r.entries(t)
	exit := entries[len(entries)-1]
	require.Equal(t, journal.Exit, exit.Kind)
	require.Contains(t, exit.Err, lease.ErrLost.Error())
}

// requireGroupVersionAfter waits until the watch has recorded a version of some Lease
// of the group renewed after t: the watch has then seen every earlier version.
func requireGroupVersionAfter(t *testing.T, w *shardLeaseWatch, after time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, lw := range w.leases {
			if records := lw.snapshot(); len(records) > 0 && records[len(records)-1].renewed.After(after) {
				return true
			}
		}
		return false
	}, leaseDuration+2*maxRetryGap+activationSlack, pollInterval, "no version of group %s written after %s", w.group, after.Format(stamp))
}

// requireCaughtUp waits until the watch has recorded the version of each Lease of its
// group that a list returns now.
func requireCaughtUp(t *testing.T, client kubernetes.Interface, namespace string, w *shardLeaseWatch) {
	t.Helper()
	var missing string
	require.Eventually(t, func() bool {
		list, err := client.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: shard.LabelGroup + "=" + w.group})
		if err != nil {
			missing = err.Error()
			return false
		}
		for _, l := range list.Items {
			if !slices.ContainsFunc(w.records(l.Name), func(r leaseRecord) bool { return r.resourceVersion == l.ResourceVersion }) {
				missing = l.Name + " at " + l.ResourceVersion
				return false
			}
		}
		return true
	}, 10*time.Second, pollInterval, "the watch of group %s has not caught up with a list: %s", w.group, missing)
}

// shardLeaseWatch records every version of every Lease of a shard group (one watch,
// the group's label selector, as the replicas watch them).
type shardLeaseWatch struct {
	group string

	mu     sync.Mutex
	leases map[string]*leaseWatch
}

// watchShardLeases records the versions of the Leases of group until t ends.
func watchShardLeases(t *testing.T, client kubernetes.Interface, namespace, group string) *shardLeaseWatch {
	g := &shardLeaseWatch{group: group, leases: map[string]*leaseWatch{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runLeaseWatch(ctx, client, namespace, metav1.ListOptions{LabelSelector: shard.LabelGroup + "=" + group}, g.add)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

func (g *shardLeaseWatch) add(l *coordinationv1.Lease) {
	g.watchOf(l.Name).add(l)
}

func (g *shardLeaseWatch) watchOf(name string) *leaseWatch {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.leases[name]
	if w == nil {
		w = &leaseWatch{}
		g.leases[name] = w
	}
	return w
}

func (g *shardLeaseWatch) records(name string) []leaseRecord { return g.watchOf(name).snapshot() }

// last is the latest version of the Lease name; zero before any.
func (g *shardLeaseWatch) last(name string) leaseRecord {
	records := g.records(name)
	if len(records) == 0 {
		return leaseRecord{}
	}
	return records[len(records)-1]
}

// moves counts the versions of name written in [from, until) that name a holder other
// than the last one named before them (a release names none, so a release and a take
// over by another replica is one move).
func (g *shardLeaseWatch) moves(name string, from, until time.Time) int {
	n := 0
	previous := ""
	for _, r := range g.records(name) {
		if r.holder == "" {
			continue
		}
		if r.holder != previous && previous != "" && !r.renewed.Before(from) && r.renewed.Before(until) {
			n++
		}
		previous = r.holder
	}
	return n
}

// handover finds, among the versions of name written after since, holder's release
// and the first version naming another holder after it.
func (g *shardLeaseWatch) handover(t *testing.T, name, holder string, since time.Time) (released, acquired leaseRecord) {
	t.Helper()
	require.Eventually(t, func() bool {
		records := g.records(name)
		for i := 1; i < len(records); i++ {
			if records[i-1].holder != holder || records[i].holder != "" || records[i].renewed.Before(since) {
				continue
			}
			for _, r := range records[i+1:] {
				if r.holder != "" {
					released, acquired = records[i], r
					return true
				}
			}
		}
		return false
	}, 10*time.Second, pollInterval, "%s: no release by %s followed by an acquisition: %+v", name, holder, g.records(name))
	return released, acquired
}

// lastRenewalBy is the last version of name holder wrote with a renew time before t.
func (g *shardLeaseWatch) lastRenewalBy(name, holder string, t time.Time) (leaseRecord, bool) {
	return g.watchOf(name).lastRenewalBefore(holder, t)
}

// firstHolderAfter is the first version of name naming holder renewed after t.
func (g *shardLeaseWatch) firstHolderAfter(name, holder string, t time.Time) (leaseRecord, bool) {
	for _, r := range g.records(name) {
		if r.holder == holder && r.renewed.After(t) {
			return r, true
		}
	}
	return leaseRecord{}, false
}

// frozenWindow is when a replica was SIGSTOPped and when it was sent SIGCONT.
type frozenWindow struct{ stopped, resumed time.Time }

// checkShardsNoOverlap fails t for every two intervals of controllers of one shard on two
// processes that overlap at all, for both definitions of an interval (see intervals),
// and returns the smallest gap seen between two processes' intervals of one shard.
//
// A SIGSTOPped replica did nothing while it was frozen, and could not be fenced: its
// intervals are cut at the SIGSTOP, and what ran after the SIGCONT until it found its
// shards taken is not checked (the sigstop step bounds it and reports it).
func checkShardsNoOverlap(t *testing.T, rs []*replica, frozen map[*replica]frozenWindow) time.Duration {
	t.Helper()
	return checkShardsNoOverlapBy(t, rs, frozen, shardOfController)
}

// checkShardsNoOverlapBy is checkShardsNoOverlap with the shard of each controller given
// by shardOf, for a scenario whose number of shards is not shardCount.
func checkShardsNoOverlapBy(t *testing.T, rs []*replica, frozen map[*replica]frozenWindow, shardOf func(controller string) int) time.Duration {
	t.Helper()
	type owned struct {
		owner *replica
		interval
	}
	var narrow, wide []owned
	for _, r := range rs {
		n, w := intervals(r, r.entries(t))
		for _, set := range []struct {
			in  []interval
			out *[]owned
		}{{n, &narrow}, {w, &wide}} {
			for _, iv := range set.in {
				if f, ok := frozen[r]; ok && iv.from.Before(f.stopped) && iv.to.After(f.stopped) {
					iv.to = f.stopped
				}
				*set.out = append(*set.out, owned{r, iv})
			}
		}
	}
	minGap := time.Duration(1<<63 - 1)
	for _, set := range []struct {
		name string
		ivs  []owned
	}{{"running → Shutdown called", narrow}, {"Run called → Shutdown returned", wide}} {
		for i, x := range set.ivs {
			for _, y := range set.ivs[i+1:] {
				if x.owner == y.owner || shardOf(x.controller) != shardOf(y.controller) {
					continue
				}
				if x.from.Before(y.to) && y.from.Before(x.to) {
					t.Errorf("shard %d: active intervals (%s) overlap: %s and %s", shardOf(x.controller), set.name, x.interval, y.interval)
					continue
				}
				gap := y.from.Sub(x.to)
				if x.from.After(y.from) {
					gap = x.from.Sub(y.to)
				}
				minGap = min(minGap, gap)
			}
		}
	}
	require.NotEmpty(t, narrow, "no controller was ever active: nothing was checked")
	return minGap
}
