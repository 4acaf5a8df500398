package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// The fencing soak (issue 34, §7): the real-API-server fencing scenarios, round after
// round, outside CI. `make soak` runs it; by hand:
//
//	E2E_SOAK_ROUNDS=100 E2E_SOAK_SLOW_ROUNDS=20 E2E_SOAK_KILL_ROUNDS=20 \
//	    KUBEBUILDER_ASSETS="$(hack/e2e-binaries.sh)" go test -race -timeout 0 -v -run TestSoak ./e2e
//
// Without $E2E_SOAK_ROUNDS it is skipped, so `make test` does not run it. Three kinds,
// each on a control plane of its own, with two replicas whose writer controller patches
// a ConfigMap every 20ms through GuardTransport:
//
//   - sigstop: the leader is SIGSTOPped until the other replica holds the Lease and
//     writes, then SIGCONTed (TestWriteFenceWhileLeaderPaused's round, guarded);
//     $E2E_SOAK_ROUNDS rounds;
//   - sigstop-slow-lease-writes: the same, with every Lease write held 100ms by a proxy
//     in front of the API server (TestShardedSlowLeaseWrites's proxy);
//     $E2E_SOAK_SLOW_ROUNDS rounds (default: $E2E_SOAK_ROUNDS);
//   - sigkill: the leader is SIGKILLed, the other takes over and writes, and a fresh
//     replica joins for the next round; $E2E_SOAK_KILL_ROUNDS rounds (default:
//     $E2E_SOAK_ROUNDS).
//
// A kind given 0 rounds is skipped. Every round is checked against the journal of
// committed writes: no write may be committed while the Lease version in force names
// another holder (nonHolderWrites). The log ends with each kind's rounds, violations,
// per-round time and handover time (the leader stopped or killed → the other
// replica's first committed write).
func TestSoak(t *testing.T) {
	rounds := soakRounds(t, "E2E_SOAK_ROUNDS", -1)
	if rounds < 0 {
		t.Skip("the fencing soak runs only with $E2E_SOAK_ROUNDS set (make soak)")
	}
	t.Run("sigstop", func(t *testing.T) {
		if rounds == 0 {
			t.Skip("0 rounds")
		}
		res := runWriteFenceVia(t, true, rounds, nil)
		reportSoak(t, "sigstop", rounds, res)
	})
	t.Run("sigstop-slow-lease-writes", func(t *testing.T) {
		n := soakRounds(t, "E2E_SOAK_SLOW_ROUNDS", rounds)
		if n == 0 {
			t.Skip("0 rounds")
		}
		res := runWriteFenceVia(t, true, n, func(s *scenario) string {
			return cluster.StartProxy(t, s.cluster, func(req *http.Request) time.Duration {
				if cluster.IsLeaseWrite(req) {
					return slowLeaseWrite
				}
				return 0
			}).Kubeconfig()
		})
		reportSoak(t, "sigstop, Lease writes +"+slowLeaseWrite.String(), n, res)
	})
	t.Run("sigkill", func(t *testing.T) {
		n := soakRounds(t, "E2E_SOAK_KILL_ROUNDS", rounds)
		if n == 0 {
			t.Skip("0 rounds")
		}
		res := runKillSoak(t, n)
		reportSoak(t, "sigkill", n, res)
	})
}

// soakRounds reads a round count from the environment; def when it is unset.
func soakRounds(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	require.GreaterOrEqual(t, n, 0, name)
	return n
}

// reportSoak logs a kind's figures and fails t on any write by a non-holder.
func reportSoak(t *testing.T, kind string, rounds int, res writeFenceResult) {
	t.Helper()
	t.Logf("soak %s: %d rounds, %d writes committed, %d by a non-holder (in %d rounds), %d refused by the guard",
		kind, rounds, res.committed, res.byNonHolder, res.roundsWithNonHolder, res.refused)
	t.Logf("soak %s: per round %s", kind, spread(res.roundTimes))
	t.Logf("soak %s: handover (stopped → the other's first write) %s", kind, spread(res.handovers))
	if len(res.resumeToRefusal) > 0 {
		t.Logf("soak %s: SIGCONT → first write refused %s (%d rounds)", kind, spread(res.resumeToRefusal), len(res.resumeToRefusal))
	}
	require.Zero(t, res.byNonHolder, "writes committed by a replica while the Lease named another holder")
}

// spread is min, median, mean and max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %s, median %s, mean %s, max %s (n = %d)",
		r(s[0]), r(s[len(s)/2]), r(sum/time.Duration(len(s))), r(s[len(s)-1]), len(s))
}

// runKillSoak runs rounds SIGKILL rounds: two replicas write through their guards; the
// leader is SIGKILLed; the other must take the Lease and write; a fresh replica (a new
// identity, a journal of its own) joins as the next standby.
func runKillSoak(t *testing.T, rounds int) writeFenceResult {
	s := newScenario(t)
	client := s.cluster.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	_, err := client.CoreV1().ConfigMaps(s.namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fencedConfigMap},
	}, metav1.CreateOptions{})
	cancel()
	require.NoError(t, err)
	leases := watchLease(t, client, s.namespace, s.leaseName)
	writes := watchWrites(t, client, s.namespace, fencedConfigMap)

	flags := []string{"--on-lease-lost=Reelect", "--writer-configmap=" + fencedConfigMap,
		"--writer-guard=true", "--writer-every=20ms"}
	started := 0
	next := func() *replica {
		started++
		return s.start(fmt.Sprintf("replica-%d", started), flags...)
	}
	live := []*replica{next(), next()}
	leader := waitLeader(t, "a first leader", startupTimeout, live)

	var res writeFenceResult
	for round := range rounds {
		other := live[0]
		if other == leader {
			other = live[1]
		}
		began := time.Now()
		writes.waitFor(t, leader.id+" writing", func(ws []committedWrite) bool {
			return len(ws) > 0 && ws[len(ws)-1].writer == leader.id
		})
		killed := leader.kill(t)
		writes.waitFor(t, other.id+" writing after "+leader.id+" was killed", func(ws []committedWrite) bool {
			return len(ws) > 0 && ws[len(ws)-1].writer == other.id
		})
		res.handovers = append(res.handovers, firstWriteBy(writes.snapshot(), other.id, killed).Sub(killed))
		before := res.byNonHolder
		res.byNonHolder += len(nonHolderWrites(t, writes.snapshot(), leases.snapshot(), killed))
		if res.byNonHolder > before {
			res.roundsWithNonHolder++
		}
		live = []*replica{other, next()}
		waitLeader(t, "the next leader, observed by the new standby", startupTimeout, live)
		res.roundTimes = append(res.roundTimes, time.Since(began))
		t.Logf("round %d: %s killed, %s writing %s later", round+1, leader.id, other.id, res.handovers[len(res.handovers)-1].Round(time.Millisecond))
		leader = other
	}
	s.stopAll()

	res.byNonHolder = len(nonHolderWrites(t, writes.snapshot(), leases.snapshot(), time.Time{}))
	res.committed = len(writes.snapshot())
	checkNoOverlap(t, s.replicas)
	return res
}
