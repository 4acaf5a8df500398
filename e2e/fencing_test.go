package e2e

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// fenceTimeout is four fifths of the fence budget, LeaseDuration − RenewDeadline −
// RetryPeriod: how long the manager gives its controllers to stop after Lost.
const fenceTimeout = (leaseDuration - renewDeadline - retryPeriod) * 4 / 5

// TestFencingWhileAPIServerPaused freezes the API server (SIGSTOP) so that the leader
// cannot renew, past the renew deadline, and resumes it (SIGCONT). The leader must fence
// (its controllers stop) before its lease could pass to another replica, and, with
// --on-lease-lost=Reelect, some replica must lead again without a process restart.
//
// Two rounds: the first resumes as soon as the leader has fenced, before the lease has
// expired, so the fenced replica (which still holds the Lease) usually takes it straight
// back; the second keeps the API server frozen past the lease's expiry, so every replica
// races for it at once on resume. A fourth replica, alone on a Lease of its own with
// --on-lease-lost=Exit, must fence too, then exit 1.
func TestFencingWhileAPIServerPaused(t *testing.T) {
	s := newScenario(t)
	api := s.cluster.APIServer()
	// Registered after the cluster's own cleanup, so it runs first: a stopped API server
	// would otherwise sit out its whole stop timeout.
	t.Cleanup(func() { _ = api.Signal(syscall.SIGCONT) })
	watch := watchLease(t, s.cluster.Clientset(), s.namespace, s.leaseName)
	soloWatch := watchLease(t, s.cluster.Clientset(), s.namespace, "solo")

	rs := []*replica{
		s.start("replica-a", "--on-lease-lost=Reelect"),
		s.start("replica-b", "--on-lease-lost=Reelect"),
		s.start("replica-c", "--on-lease-lost=Reelect"),
	}
	solo := s.start("solo", "--lease-name=solo", "--on-lease-lost=Exit")
	leader := waitLeader(t, "a first leader, observed by all", startupTimeout, rs)
	waitLeader(t, "the solo replica leading its own Lease", startupTimeout, []*replica{solo})

	for round, hold := range []time.Duration{0, leaseDuration + retryPeriod} {
		paused := time.Now()
		sendSignal(t, api, syscall.SIGSTOP)
		t.Logf("round %d: API server paused; %s leads", round+1, leader.id)

		// client-go gives up RenewDeadline after the renewal that follows the last
		// successful one, at most RetryPeriod + RenewDeadline after it, and the
		// controllers then have the fence timeout to stop.
		fenceBound := retryPeriod + renewDeadline + fenceTimeout
		all := waitFor(t, leader.id+" fencing", fenceBound+activationSlack, []*replica{leader}, func(all [][]journal.Entry) bool {
			_, lost := firstAfter(all[0], paused, supervision("LeaderLost"))
			_, stopped := allStoppedSince(all[0])
			return lost && stopped
		})
		lost, _ := firstAfter(all[0], paused, supervision("LeaderLost"))
		fenced, _ := allStoppedSince(all[0])
		if round == 0 {
			waitFor(t, "the solo replica fencing", fenceBound+activationSlack, []*replica{solo}, func(all [][]journal.Entry) bool {
				_, stopped := allStoppedSince(all[0])
				return stopped
			})
		}
		if hold > 0 {
			// The stimulus, not a synchronisation: keep the API server frozen until the
			// lease has expired by every clock, so that on resume any replica may take it.
			select {
			case <-time.After(time.Until(paused.Add(hold))):
			case <-t.Context().Done():
				t.FailNow()
			}
		}
		resumed := time.Now()
		sendSignal(t, api, syscall.SIGCONT)
		figure(t, "fencing: API server paused → LeaderLost", lost.At().Sub(paused), "")
		figure(t, "fencing: LeaderLost → every controller stopped", fenced.Sub(lost.At()), "(fence timeout "+fenceTimeout.String()+")")
		require.Less(t, fenced.Sub(lost.At()), fenceTimeout, "%s did not fence within the fence timeout", leader.id)

		// Once the watch has seen a version written after the resume, it has seen every
		// earlier one, the renewals whose responses the freeze swallowed included.
		requireVersionAfter(t, watch, resumed)
		requireFencedBeforeExpiry(t, watch, leader.id, lost.At(), fenced)

		// Some replica leads again: the fenced one right away if the lease still names
		// it, another once the lease has expired by its clock.
		next := waitLeader(t, "a leader after the API server resumed", leaseDuration+2*maxRetryGap+activationSlack, rs)
		running, _ := allRunningSince(next.entries(t))
		figure(t, []string{
			"fencing: resumed once fenced → a leader running",
			"fencing: resumed past expiry → a leader running",
		}[round], running.Sub(resumed), "(leader: "+next.id+")")
		t.Logf("round %d: %s leads after the resume", round+1, next.id)
		for _, r := range rs {
			requireNoRestart(t, r)
		}
		if round == 0 {
			requireSoloExited(t, solo, soloWatch)
		}
		leader = next
	}

	s.stopAll()
	checkNoOverlap(t, rs)
}

// requireVersionAfter waits until the watch has recorded a version of the Lease renewed
// after t.
func requireVersionAfter(t *testing.T, w *leaseWatch, after time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		records := w.snapshot()
		return len(records) > 0 && records[len(records)-1].renewed.After(after)
	}, leaseDuration+2*maxRetryGap+activationSlack, pollInterval, "no version of the Lease written after %s", after.Format(stamp))
}

// requireFencedBeforeExpiry checks the fence against the Lease: the last version holder
// wrote before it reported the loss expires (by the earliest clock that could take it
// over) after every controller of holder had stopped, and no other holder acquired the
// lease before then.
func requireFencedBeforeExpiry(t *testing.T, w *leaseWatch, holder string, lost, fenced time.Time) {
	t.Helper()
	last, ok := w.lastRenewalBefore(holder, lost)
	require.True(t, ok, "no renewal by %s among the Lease's versions", holder)
	figure(t, "fencing: last renewal → every controller stopped", fenced.Sub(last.renewed), "")
	figure(t, "fencing: margin, controllers stopped → lease expiry", last.expires().Sub(fenced), "(fence budget "+(leaseDuration-renewDeadline-retryPeriod).String()+")")
	require.True(t, fenced.Before(last.expires()), "%s fenced at %s, after its lease expired at %s (renewed %s)",
		holder, fenced.Format(stamp), last.expires().Format(stamp), last.renewed.Format(stamp))
	for _, r := range w.snapshot() {
		if r.holder != "" && r.holder != holder && r.acquired.After(last.renewed) {
			require.False(t, r.acquired.Before(fenced.Truncate(time.Microsecond)),
				"%s acquired the lease at %s, before %s had fenced at %s", r.holder, r.acquired.Format(stamp), holder, fenced.Format(stamp))
		}
	}
}

// requireNoRestart checks that a Reelect replica is still the process it started as,
// and went back to Electing after a loss rather than failing.
func requireNoRestart(t *testing.T, r *replica) {
	t.Helper()
	select {
	case <-r.proc.Done():
		t.Fatalf("%s exited: %v", r.id, r.proc.ExitErr())
	default:
	}
	entries := r.entries(t)
	begins := slices.DeleteFunc(slices.Clone(entries), func(e journal.Entry) bool { return e.Kind != journal.Begin })
	require.Len(t, begins, 1, "%s started more than once", r.id)
	require.Equal(t, r.proc.Pid(), begins[0].PID)
	for i, e := range entries {
		if e.Kind != journal.Supervision || e.Type != "LeaderLost" {
			continue
		}
		next := slices.IndexFunc(entries[i+1:], supervision("PhaseChanged"))
		require.GreaterOrEqual(t, next, 0, "%s: no phase after LeaderLost", r.id)
		require.Equal(t, "Electing", entries[i+1+next].Phase, "%s did not go back to Electing on a lost lease with Reelect", r.id)
	}
}

// requireSoloExited checks that the replica with --on-lease-lost=Exit fenced before its
// lease expired, then exited 1 with Err wrapping the loss.
func requireSoloExited(t *testing.T, solo *replica, w *leaseWatch) {
	t.Helper()
	select {
	case <-solo.proc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the solo replica with --on-lease-lost=Exit did not exit after losing its lease")
	}
	var exitErr *exec.ExitError
	require.True(t, errors.As(solo.proc.ExitErr(), &exitErr), "want exit status 1, have %v", solo.proc.ExitErr())
	require.Equal(t, 1, exitErr.ExitCode())
	entries := solo.entries(t)
	exit := entries[len(entries)-1]
	require.Equal(t, journal.Exit, exit.Kind)
	require.True(t, strings.Contains(exit.Err, "lease") && strings.Contains(exit.Err, "lost"), "exit error: %q", exit.Err)
	lost, ok := firstAfter(entries, time.Time{}, supervision("LeaderLost"))
	require.True(t, ok)
	fenced, ok := allStoppedSince(entries)
	require.True(t, ok)
	requireVersionAfter(t, w, time.Time{})
	last, ok := w.lastRenewalBefore(solo.id, lost.At())
	require.True(t, ok)
	require.True(t, fenced.Before(last.expires()), "solo fenced at %s, after its lease expired at %s", fenced.Format(stamp), last.expires().Format(stamp))
}
