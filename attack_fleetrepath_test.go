package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// The fleet is removed (its provider ignoring its context, so the runner's
// goroutines outlive the removal) and added again at another path before
// they return: its members move to the new path. Whoever watches the old
// path sees each member disengaged there, once the old runner has returned
// and before the member is engaged at the new path: the old path's
// subtree is gone and its ready series deleted, as a disengage leaves it.
//
// Before, the old path's events just stopped (its last word on a member
// was ClusterOnline), while the member was announced at the new path.
func TestAttackFleetReaddedElsewhereDisengagesTheOldPath(t *testing.T) {
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := &fsStubborn{initial: map[string]*rest.Config{"a": a.config(), "b": b.config()}, release: make(chan struct{})}
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	m, log := fleetManagerWith(t, clocktesting.NewFakeClock(time.Now()),
		cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{ShutdownTimeout: gDuration(100 * time.Millisecond)}},
		cm.NewGroup("y", cm.SupervisionSpec{}, fleet))
	startFleet(t, m)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/b"))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	t.Logf("RemoveChild y: %v", m.RemoveChild(ctx, "y")) // its Shutdown overruns: the provider ignores ctx
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)))
	close(prov.release) // the first provider returns: the members move to z
	for _, name := range []string{"a", "b"} {
		// Published after the move's events: those are in the log.
		log.waitFor(t, nil, 0, is(cm.ClusterOnline, "z/fleet/"+name))
	}
	events := log.all()
	for _, name := range []string{"a", "b"} {
		from, to := "y/fleet/"+name, "z/fleet/"+name
		fsOrder(t, events, from)
		fsOrder(t, events, to)
		disengaged, engaged := -1, -1
		for i, e := range events {
			if disengaged < 0 && is(cm.ClusterDisengaged, from)(e) {
				disengaged = i
			}
			if engaged < 0 && is(cm.ClusterEngaged, to)(e) {
				engaged = i
			}
		}
		require.GreaterOrEqual(t, disengaged, 0, "%s: no ClusterDisengaged at the old path; events: %v", name, events)
		require.Less(t, disengaged, engaged, "%s: disengaged at %s after it was engaged at %s", name, from, to)
		_, ok := clusterReady(t, m, "y/fleet", name)
		require.False(t, ok, "%s: ready series left at the old path", name)
	}
}
