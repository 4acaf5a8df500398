package controllermanager_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// The loop's own add of a member's group waits on a store whose Recover
// ignores its context (an informer sync on a stop channel of its own);
// then the member goes Offline, is disengaged, or is engaged on a new
// config. The loop's StopChild or RemoveChild of the group is held by that
// Recover; it is bounded by the group's ShutdownTimeout plus a probe
// period on the manager's clock, after which the loop reads the tree (the
// group Stopping past its ShutdownTimeout) and says where the member
// stands while the Recover is still held. Nothing is built beside the old
// group while it is in the tree: a re-engage of the same name, or the new
// config, is built only once it has gone. Before, the loop waited in its
// request for as long as the Recover ran: no ClusterOffline, no
// ClusterDisengaged, no verdict on the new config.
func TestFleetStopOrRemovalHeldByADeafRecoverIsBounded(t *testing.T) {
	for _, v := range []string{"offline", "disengage", "rotate"} {
		t.Run(v, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			a := newFakeMember(t, memberOK)
			prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
			held, release := make(chan struct{}), make(chan struct{})
			var once, closeOnce sync.Once
			open := func() { closeOnce.Do(func() { close(release) }) }
			var builds atomic.Int32
			fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable {
				if builds.Add(1) == 1 {
					return []cm.Runnable{cm.StoreChild(deafStore{held: held, release: release, once: &once}), &clusterCtrl{cluster: c}}
				}
				return []cm.Runnable{&clusterCtrl{cluster: c}}
			}, deafRecoverSpec())
			mgr, log := fleetManager(t, clk, fleet)
			t.Cleanup(open) // before the manager's shutdown
			startFleet(t, mgr)
			awaitRecv(t, held, "the store's Recover, ignoring its context")

			var want func(cm.Event) bool
			switch v {
			case "offline":
				a.set(memberFailing)
				want = is(cm.ClusterOffline, "fleet/a")
			case "disengage":
				prov.Disengage(t, "a")
				want = is(cm.ClusterDisengaged, "fleet/a")
			case "rotate":
				// To a member that does not answer: its verdict (Offline) is
				// said without a group of its own, which waits for the old
				// one to go.
				b := newFakeMember(t, memberFailing)
				require.NoError(t, prov.Engage(t, "a", b.config()))
				want = is(cm.ClusterOffline, "fleet/a")
			}
			// Bounded on the fake clock: ShutdownTimeout (2 s) plus a probe
			// period, and FailureThreshold (3 s), stepped a period at a time.
			log.waitFor(t, clk, fleetPeriod, want)
			select {
			case <-release:
				t.Fatal("the Recover was released")
			default:
			}
			cs, ok := fleetChild(t, mgr, "fleet/a")
			require.True(t, ok, "the group left the tree while its Recover is held")
			t.Logf("%s: said while the Recover is held; group %s", v, cs.State)

			if v == "disengage" {
				// Engaged again while the old group is still in the tree:
				// nothing is built beside it until it has gone.
				require.NoError(t, prov.Engage(t, "a", a.config()))
				settleProbes(t, clk, log, a, 3)
				require.EqualValues(t, 1, builds.Load(), "a new subtree built while the old group is in the tree")
				open()
				log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/a"))
				require.EqualValues(t, 2, builds.Load())
			} else {
				require.EqualValues(t, 1, builds.Load(), "built again while the old group is in the tree")
			}
		})
	}
}

func deafRecoverSpec() cm.FleetSpec {
	s := fleetSpec()
	s.Supervision.ShutdownTimeout = metav1.Duration{Duration: 2 * time.Second}
	return s
}
