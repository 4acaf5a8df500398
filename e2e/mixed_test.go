package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMixedVersionPair is a rolling upgrade's pair on one Lease: replicas of the
// previous release (--elector=client-go: client-go's LeaderElector on a LeaseLock, run
// directly) and of this one (the manager, whose single lease is lease/shard's Elector)
// take the lease from each other in turn, by SIGTERM and by SIGKILL, in both directions;
// no two of them ever run their controllers at once (checkNoOverlap).
func TestMixedVersionPair(t *testing.T) {
	s := newScenario(t)
	watch := watchLease(t, s.cluster.Clientset(), s.namespace, s.leaseName)
	previous := func(id string) *replica { return s.start(id, "--elector=client-go") }

	leader := previous("previous-1")
	waitLeader(t, "the previous release leads", startupTimeout, []*replica{leader})
	rs := []*replica{leader}
	for i, step := range []struct {
		name    string
		standby func(string) *replica
		id      string
		kill    bool
	}{
		{"SIGTERM, previous → current", func(id string) *replica { return s.start(id) }, "current-1", false},
		{"SIGTERM, current → previous", previous, "previous-2", false},
		{"SIGKILL, previous → current", func(id string) *replica { return s.start(id) }, "current-2", true},
		{"SIGKILL, current → previous", previous, "previous-3", true},
	} {
		standby := step.standby(step.id)
		rs = append(rs, standby)
		require.Equal(t, leader, waitLeader(t, step.name+": the leader, observed by the standby too", startupTimeout, []*replica{leader, standby}))
		var from time.Time
		bound := maxRetryGap // a previous-release standby polls; the current one watches
		if step.kill {
			from = leader.kill(t)
			bound = leaseDuration + 2*maxRetryGap
		} else {
			from = time.Now()
			require.NoError(t, leader.proc.Stop(30*time.Second), "%s must exit 0 after SIGTERM", leader.id)
		}
		next := waitLeader(t, step.name+": the standby takes over", bound+activationSlack, []*replica{standby})
		elected, ok := firstAfter(next.entries(t), from, supervision("LeaderElected"))
		require.True(t, ok, "%s runs its controllers but was not elected", next.id)
		figure(t, "mixed versions: "+step.name+": signal → new leader elected", elected.At().Sub(from), "")
		// client-go sees a change of the record only when its JSON does, whose times
		// are whole seconds: a previous-release standby may judge expiry a second late.
		require.Less(t, elected.At().Sub(from), bound+requestSlack+time.Second, "step %d: taken over too late", i)
		requireHolder(t, watch, next.id)
		leader = next
	}
	s.stopAll()
	gap := checkNoOverlap(t, rs)
	figure(t, "mixed versions: closest two replicas' intervals came", gap, "(no overlap)")
}
