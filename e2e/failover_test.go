package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// startupTimeout bounds the first election of a fresh set of replicas: the programs
// start (race-instrumented), find no Lease, and one creates it.
const startupTimeout = 30 * time.Second

// activationSlack is what a new leader may take, once it holds the lease, to run all
// its controllers (the informer's cache sync is one LIST): generous, for -race on two
// shared cores.
const activationSlack = 2 * time.Second

// requestSlack is what a bound derived from the election's timing allows on top for the
// latency of the requests involved, on two shared cores under -race.
const requestSlack = 500 * time.Millisecond

// watchHandoverBound is how soon after a release a watching standby must have been
// elected: the watch event and one write to the API server, with room for a loaded
// machine running the race detector (measured: see docs/leader-election.md).
const watchHandoverBound = 300 * time.Millisecond

// TestFailoverAfterSIGKILL: three replicas of one Lease, exactly one leads; the leader
// is SIGKILLed, as a node failure would end it, and another takes over once the lease
// has expired; then that one is killed too, and the last takes over. No two replicas'
// controllers are ever active at once, a killed one's counting as active until it died.
func TestFailoverAfterSIGKILL(t *testing.T) {
	s := newScenario(t)
	watch := watchLease(t, s.cluster.Clientset(), s.namespace, s.leaseName)
	rs := []*replica{s.start("replica-a"), s.start("replica-b"), s.start("replica-c")}

	live := rs
	leader := waitLeader(t, "a first leader, observed by all", startupTimeout, live)
	for _, r := range rs {
		elected := slices.ContainsFunc(r.entries(t), supervision("LeaderElected"))
		require.Equal(t, r == leader, elected, "%s: LeaderElected", r.id)
	}
	requireHolder(t, watch, leader.id)

	for len(live) > 1 {
		killed := leader.kill(t)
		live = slices.DeleteFunc(slices.Clone(live), func(r *replica) bool { return r == leader })
		// client-go's worst case: the last renewal was written just before the kill, a
		// standby observed it one retry gap later, and it retries one gap after the
		// lease has expired by its clock; plus the latency of two requests.
		bound := leaseDuration + 2*maxRetryGap
		next := waitLeader(t, "a new leader after the SIGKILL", bound+activationSlack, live)

		entries := next.entries(t)
		elected, ok := firstAfter(entries, killed, supervision("LeaderElected"))
		require.True(t, ok, "%s runs its controllers but was not elected", next.id)
		running, _ := allRunningSince(entries)
		figure(t, "failover: SIGKILL → new leader elected", elected.At().Sub(killed), "(LD + RP = "+(leaseDuration+retryPeriod).String()+"; bound LD + 2×2.2×RP = "+bound.String()+")")
		figure(t, "failover: SIGKILL → its controllers running", running.Sub(killed), "")
		require.Less(t, elected.At().Sub(killed), bound+requestSlack, "the new leader was elected later than client-go allows")
		requireHolder(t, watch, next.id)
		leader = next
	}

	s.stopAll()
	checkNoOverlap(t, rs)
}

// TestHandoverOnSIGTERM: the leader of three replicas is stopped with SIGTERM, twice in
// a row: each time it stops its controllers, releases the lease and exits 0, and a
// standby takes over at its next retry, not a lease duration later.
func TestHandoverOnSIGTERM(t *testing.T) {
	s := newScenario(t)
	watch := watchLease(t, s.cluster.Clientset(), s.namespace, s.leaseName)
	rs := []*replica{s.start("replica-a"), s.start("replica-b"), s.start("replica-c")}

	live := rs
	leader := waitLeader(t, "a first leader, observed by all", startupTimeout, live)
	for round := 1; round <= 2; round++ {
		signalled := time.Now()
		require.NoError(t, leader.proc.Stop(30*time.Second), "%s must exit 0 after SIGTERM", leader.id)
		old := leader.entries(t)
		released, ok := firstAfter(old, signalled, func(e journal.Entry) bool { return e.Kind == journal.ShutdownReturned })
		require.True(t, ok, "%s exited without ShutdownAndWait returning", leader.id)
		stopped, ok := allStoppedSince(old)
		require.True(t, ok, "%s exited with a controller not stopped", leader.id)
		require.False(t, released.At().Before(stopped), "the lease was released before every controller had stopped")
		releaseWritten := requireReleasedAfter(t, watch, leader.id, stopped)

		live = slices.DeleteFunc(slices.Clone(live), func(r *replica) bool { return r == leader })
		// The release is seen by a standby's watch at once, and taken with one write:
		// no retry period (client-go's elector polled: up to 2.2×RP = 1.1s here).
		bound := watchHandoverBound
		next := waitLeader(t, "a standby taking over the released lease", bound+activationSlack, live)
		entries := next.entries(t)
		elected, ok := firstAfter(entries, signalled, supervision("LeaderElected"))
		require.True(t, ok)
		running, _ := allRunningSince(entries)
		figure(t, "handover: SIGTERM → old leader released", released.At().Sub(signalled), "")
		// From the release as written (its renewTime, this machine's clock), not from
		// ShutdownAndWait's return, which comes after the write's answer and may
		// follow the new leader's election.
		figure(t, "handover: released → new leader elected", elected.At().Sub(releaseWritten), "(bound "+bound.String()+"; a watch event and a write)")
		figure(t, "handover: released → its controllers running", running.Sub(releaseWritten), "(the configmaps informer's sync included)")
		figure(t, "handover: released → its ticker controller running", controllerStates(entries)["reconciler-a"].at.Sub(releaseWritten), "(no informer to sync)")
		require.Less(t, elected.At().Sub(releaseWritten), bound,
			"the standby took over later than a watch event and a write allow")
		leader = next
	}

	s.stopAll()
	gap := checkNoOverlap(t, rs)
	figure(t, "handover: closest two replicas' intervals came", gap, "(no overlap)")
}

// requireHolder checks that the Lease names holder, waiting for the watch to catch up.
func requireHolder(t *testing.T, w *leaseWatch, holder string) {
	t.Helper()
	require.Eventually(t, func() bool {
		records := w.snapshot()
		return len(records) > 0 && records[len(records)-1].holder == holder
	}, 10*time.Second, pollInterval, "the Lease does not name %s; versions: %+v", holder, w.snapshot())
}

// requireReleasedAfter checks that holder's release (no holder) is a version of the
// Lease, written after its controllers had stopped.
func requireReleasedAfter(t *testing.T, w *leaseWatch, holder string, stopped time.Time) (written time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		records := w.snapshot()
		for i := 1; i < len(records); i++ {
			if records[i-1].holder == holder && records[i].holder == "" {
				// renewTime has microseconds.
				require.False(t, records[i].renewed.Before(stopped.Truncate(time.Microsecond)),
					"%s released the lease at %s, before its last controller stopped at %s", holder,
					records[i].renewed.Format(stamp), stopped.Format(stamp))
				written = records[i].renewed
				return true
			}
		}
		return false
	}, 10*time.Second, pollInterval, "no release by %s among the Lease's versions: %+v", holder, w.snapshot())
	return written
}
