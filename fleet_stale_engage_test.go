package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
)

// A provider's goroutine that outlives its Run (a leaked watch) keeps the
// engage and disengage that Run was handed. Once the fleet is removed
// they refuse: a late engage is answered with an error, and neither it
// nor a late disengage reaches the same *Fleet added again, whose new Run
// engages only what it knows ("a"). Before, the late engage was kept and
// its cluster built and run in the fleet added again, and the late
// disengage removed "a" from it.
func TestFleetEngageOfAnEndedProviderRunIsRefused(t *testing.T) {
	clk, a, prov, bl, fleet, mgr, log := oneMemberOnline(t)
	prov.mu.Lock()
	engage, disengage := prov.engage, prov.disengage
	prov.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, mgr.RemoveChild(ctx, "fleet"))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))

	late := newFakeMember(t, memberOK)
	err := engage("late", late.config())
	require.Error(t, err, "an engage by a provider's Run that has ended is accepted")
	_, listed := fleet.Cluster("late")
	require.False(t, listed, "a refused engage lists its cluster")

	require.NoError(t, mgr.AddChild(ctx, fleet))
	log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/a"))
	disengage("a") // the ended Run's: does nothing to the fleet added again
	// Three probes of "a" by its new loop: time for a kept "late" to be
	// probed and built, or for "a" to be removed on the late disengage.
	settleProbes(t, clk, log, a, 3)
	_, listed = fleet.Cluster("late")
	require.False(t, listed, "a cluster engaged after the fleet was removed is carried into the fleet added again")
	require.Empty(t, bl.of("late"), "a cluster engaged after the fleet was removed is built")
	st, ok := fleet.Cluster("a")
	require.True(t, ok, "a disengage by a provider's Run that has ended disengaged a cluster of the fleet added again")
	require.Equal(t, cm.ClusterStateOnline, st.State)
	require.Equal(t, 1, log.count(is(cm.ClusterDisengaged, "fleet/a")), "a disengaged again")
}
