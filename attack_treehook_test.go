package controllermanager_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// The fleet's runner alone is removed (RemoveChild("y/fleet/provider"): its
// group and its members' groups stay), its provider ignoring its context
// so that the runner's goroutines outlive the removal. The fleet is still
// in the tree (its group is): an add of it under another group is refused
// (ErrFleetInUse) until its group is removed, then accepted; once the old
// runner returns no member group is left at the old path.
//
// Before, the add was accepted (the runner's removal counted as the
// fleet's): the members moved to the new path and their groups were added
// there, while their groups at the old path stayed in the tree, their
// controllers running: two subtrees per cluster (3/3).
func TestAttackTreeRunnerRemovedAloneThenMovedLeavesNoOldGroups(t *testing.T) {
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	prov := &fsStubborn{initial: map[string]*rest.Config{"a": a.config()}, release: make(chan struct{})}
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	m, log := fleetManagerWith(t, clocktesting.NewFakeClock(time.Now()),
		cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{ShutdownTimeout: gDuration(100 * time.Millisecond)}},
		cm.NewGroup("y", cm.SupervisionSpec{}, fleet))
	startFleet(t, m)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	t.Logf("RemoveChild y/fleet/provider: %v", m.RemoveChild(ctx, "y/fleet/provider")) // overruns: the provider ignores ctx
	require.ErrorIs(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)), cm.ErrFleetInUse,
		"the fleet's group, with its members' groups, is still in the tree at y/fleet")
	require.NoError(t, m.RemoveChild(ctx, "y/fleet"))
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)))
	close(prov.release)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "z/fleet/a"))
	pollUntil(t, 3*time.Second, func() string {
		if _, ok := mustStatus(t, m).Child("y/fleet/a"); ok {
			return "y/fleet/a still in the tree: the cluster runs at y/fleet/a and at z/fleet/a"
		}
		return ""
	})
}

// The cluster is disengaged and engaged again on the same config after the
// member's loop built its subtree and looked that it is still wanted, but
// before the supervisor took the add (while it names the subtree's
// children). The engage made a new Cluster: the subtree built on the
// disengaged one (its Context ended) is refused as the add is taken, and
// the one built on the new Cluster runs. With disengage alone, nothing of
// the cluster stays in the tree.
func TestAttackTreeMemberDisengagedAndEngagedDuringItsAdd(t *testing.T) {
	for _, again := range []bool{true, false} {
		t.Run(map[bool]string{true: "engaged again", false: "disengaged"}[again], func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			a := newFakeMember(t, memberOK)
			prov := newHandProvider(nil)
			bl := newBuilds()
			var mu sync.Mutex
			var firsts []*rotatingCtrl
			build := func(c cm.Cluster) []cm.Runnable {
				rs := bl.build(c)
				mu.Lock()
				defer mu.Unlock()
				if len(firsts) > 0 {
					return rs
				}
				first := &rotatingCtrl{clusterCtrl: rs[0].(*clusterCtrl), rotate: func() {
					prov.mu.Lock()
					engage, disengage := prov.engage, prov.disengage
					prov.mu.Unlock()
					disengage("a")
					if again {
						if err := engage("a", a.config()); err != nil {
							panic(err)
						}
					}
				}}
				firsts = append(firsts, first)
				return []cm.Runnable{first}
			}
			fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
			mgr, log := fleetManager(t, clk, fleet)
			startFleet(t, mgr)
			require.NoError(t, prov.Engage(t, "a", a.config()))
			if again {
				log.waitUntil(t, clk, fleetPeriod, func() bool {
					st, ok := fleet.Cluster("a")
					return ok && st.State == cm.ClusterStateOnline && len(bl.of("a")) >= 2 && bl.of("a")[1].runs.Load() > 0
				})
				cs := bl.of("a")
				require.Len(t, cs, 2, "built once per Cluster")
				require.NoError(t, cs[1].cluster.Context().Err())
			} else {
				log.waitFor(t, clk, fleetPeriod, is(cm.ClusterDisengaged, "fleet/a"))
				_, ok := fleetChild(t, mgr, "fleet/a")
				require.False(t, ok, "fleet/a in the tree after it was disengaged")
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, firsts, 1)
			require.Zero(t, firsts[0].runs.Load(), "the subtree built on the disengaged Cluster ran")
			require.Error(t, firsts[0].cluster.Context().Err())
		})
	}
}
