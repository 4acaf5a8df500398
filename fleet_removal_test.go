package controllermanager_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// Found by a hostile read of the fleet (issue 35's review): a fleet
// removed from the tree, a provider that ignores its context at shutdown,
// and a Secret put back as it was.

// A fleet removed with RemoveChild disengages its clusters: before, each
// stayed Online in Clusters, its ready series stayed 1, and its Context
// never ended.
func TestFleetRemovedDisengagesItsClusters(t *testing.T) {
	_, _, _, bl, fleet, mgr, log := oneMemberOnline(t)
	require.NoError(t, mgr.RemoveChild(context.Background(), "fleet"))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	assert.Empty(t, fleet.Clusters())
	_, has := clusterReady(t, mgr, "fleet", "a")
	assert.False(t, has, "the ready series of a removed fleet's cluster")
	require.Error(t, bl.of("a")[0].cluster.Context().Err(), "the cluster's Context outlives its fleet")
	_, ok := fleetChild(t, mgr, "fleet/a")
	assert.False(t, ok)
}

// A fleet removed and added again runs its clusters again, whether the
// add comes before or after the removal has disengaged them: before, a
// member stayed Online with no group in the tree.
func TestFleetRemovedAndAddedAgainRunsItsClusters(t *testing.T) {
	for _, waitDisengaged := range []bool{true, false} {
		t.Run(map[bool]string{true: "after-disengage", false: "at-once"}[waitDisengaged], func(t *testing.T) {
			clk, _, _, _, fleet, mgr, log := oneMemberOnline(t)
			require.NoError(t, mgr.RemoveChild(context.Background(), "fleet"))
			if waitDisengaged {
				log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
			}
			require.NoError(t, mgr.AddChild(context.Background(), fleet))
			log.waitUntil(t, clk, fleetPeriod, func() bool {
				cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
				st, known := fleet.Cluster("a")
				return ok && cs.State == supervisor.StateRunning && known && st.State == cm.ClusterStateOnline
			})
			v, has := clusterReady(t, mgr, "fleet", "a")
			assert.True(t, has)
			assert.Equal(t, 1.0, v)
		})
	}
}

// The manager shuts down while its provider ignores its context: the
// runner's Shutdown gives up at ShutdownTimeout, and the clusters'
// Contexts end once the provider returns. Before, they never did.
func TestFleetShutdownEndsClusterContextsPastAStubbornProvider(t *testing.T) {
	prov, bl, mgr, _ := stubbornFleet(t)
	c := bl.of("a")[0].cluster

	// The provider's Run never returns until released: ShutdownAndWait
	// returns at its context's end either way (how soon does not matter).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	mgr.ShutdownAndWait(ctx) // gives up on fleet/provider
	close(prov.release)      // the provider returns at last
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	select {
	case <-c.Context().Done():
	case <-deadline.C:
		t.Fatal("the cluster's Context never ended after the manager stopped")
	}
}

// A kubeconfig Secret broken, then put back as it was: the cluster is
// engaged with that config already, and its Problem is over. Before, the
// equal engage returned before clearing it, and it stayed for good.
func TestFleetSecretPutBackClearsItsProblem(t *testing.T) {
	a := newFakeMember(t, memberOK)
	good := kubeconfig(t, a.srv.URL, "token-1")
	client := fake.NewClientset(kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, good))
	watching := make(chan struct{}, 16)
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		watching <- struct{}{}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	fleet := cm.NewFleet("fleet", cm.KubeconfigSecrets(client, "fleet", labels.SelectorFromSet(labels.Set{"fleet": "member"})),
		newBuilds().build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	awaitRecv(t, watching, "the provider's watch")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))

	secrets, ctx := client.CoreV1().Secrets("fleet"), context.Background()
	_, err := secrets.Update(ctx, kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, []byte("{not: [a kubeconfig")), metav1.UpdateOptions{})
	require.NoError(t, err)
	log.waitFor(t, nil, 0, func(e cm.Event) bool { return e.Type == cm.ClusterEngaged && e.Child == "fleet/a" && e.Err != nil })
	st, _ := fleet.Cluster("a")
	require.Error(t, st.Problem, "the broken Secret is a problem")

	_, err = secrets.Update(ctx, kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, good), metav1.UpdateOptions{})
	require.NoError(t, err)
	log.waitUntil(t, nil, 0, func() bool {
		st, _ := fleet.Cluster("a")
		return st.Problem == nil
	})
	st, _ = fleet.Cluster("a")
	assert.Equal(t, cm.ClusterStateOnline, st.State)
}

// A member Offline, its group stopped by its loop; the whole fleet is
// restarted (RestartChild), or stopped and started. The start leaves the
// member's group as it was, stopped: its admission refuses a start by hand
// while the member is Offline (TreeStarting). Before stop 62 the start
// started the member's controllers against an API server that fails its
// probes, while Clusters said Offline, and the loop, reading the tree for
// a start it never made, stopped the group again; before stop 56 they ran
// on.
func TestFleetRestartedWhileAMemberIsOfflineKeepsItStopped(t *testing.T) {
	for _, how := range []string{"restart", "stop-start"} {
		t.Run(how, func(t *testing.T) {
			clk, a, _, bl, fleet, mgr, log := oneMemberOnline(t)
			a.set(memberFailing)
			log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))
			log.waitUntil(t, clk, fleetPeriod, func() bool {
				cs, ok := fleetChild(t, mgr, "fleet/a")
				return ok && cs.State == supervisor.StateStopped
			})
			ctx := context.Background()
			if how == "restart" {
				require.NoError(t, mgr.RestartChild(ctx, "fleet"))
			} else {
				require.NoError(t, mgr.StopChild(ctx, "fleet"))
				require.NoError(t, mgr.StartChild(ctx, "fleet"))
			}
			// The fleet's runner started again; the Offline member's group
			// was left as it was, stopped: answered once every start call
			// has returned, so nothing of it started meanwhile. (Before,
			// the member's controller ran again against the dead API
			// server, and the fleet then stopped it.)
			log.waitForNth(t, 2, is(cm.ChildStarted, "fleet/provider"))
			require.Equal(t, int32(1), bl.of("a")[0].runs.Load(), "the Offline member's controller was not started")
			cs, _ := fleetChild(t, mgr, "fleet/a")
			assert.Equal(t, supervisor.StateStopped, cs.State)
			st, _ := fleet.Cluster("a")
			assert.Equal(t, cm.ClusterStateOffline, st.State)
			cs, _ = fleetChild(t, mgr, "fleet/a/ctrl")
			assert.Equal(t, supervisor.StateStopped, cs.State)

			// Back: it runs again.
			a.set(memberOK)
			log.waitUntil(t, clk, fleetPeriod, aRunsOnline(t, fleet, mgr))
		})
	}
}

// A member's group removed by hand (RemoveChild "fleet/a") while the
// member is Online and engaged: the fleet adds it again. Before, the
// member stayed Online, its ready series 1, with no group in the tree.
func TestFleetMemberGroupRemovedByHandIsAddedAgain(t *testing.T) {
	clk, _, _, bl, fleet, mgr, log := oneMemberOnline(t)
	require.NoError(t, mgr.RemoveChild(context.Background(), "fleet/a"))
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
		return ok && cs.State == supervisor.StateRunning
	})
	st, _ := fleet.Cluster("a")
	assert.Equal(t, cm.ClusterStateOnline, st.State)
	assert.Len(t, bl.of("a"), 2, "built again: the removed group's children were shut down")
}

// A cluster engaged again right as its loop disengages it: its
// ClusterDisengaged came, 1 time in 60, after the new ClusterEngaged (the
// loop dropped the member, the engage made a new one and published, then
// the old loop published), and the old loop could delete the new member's
// ready series. The loop now publishes before it lets the member go, and
// an engage of the name waits for it. Odd rounds engage at once after the
// disengage; even ones as soon as Clusters stops listing the member (the
// moment the old loop let it go), spinning for it.
func TestFleetEngagedAgainAsItIsDisengagedEndsEngaged(t *testing.T) {
	clk, a, prov, _, fleet, mgr, log := oneMemberOnline(t)
	for round := range 60 {
		prov.Disengage(t, "a")
		if round%2 == 0 {
			deadline := time.Now().Add(wait)
			for _, ok := fleet.Cluster("a"); ok; _, ok = fleet.Cluster("a") {
				require.True(t, time.Now().Before(deadline), "round %d: not disengaged", round)
				runtime.Gosched()
			}
		}
		require.NoError(t, prov.Engage(t, "a", a.config()))
		// Events reach the log on the subscriber's goroutine, behind the
		// state: wait for this round's ClusterOnline too (the first came
		// before round 0), so that every event published before it, this
		// round's ClusterEngaged among them, is in the log. Without it a
		// loaded machine failed the check below on a log that had not yet
		// received the ClusterEngaged (make unit beside 3 busy loops).
		log.waitUntil(t, clk, fleetPeriod, func() bool {
			st, ok := fleet.Cluster("a")
			cs, running := fleetChild(t, mgr, "fleet/a/ctrl")
			v, has := clusterReady(t, mgr, "fleet", "a")
			return ok && st.State == cm.ClusterStateOnline && running && cs.State == supervisor.StateRunning && has && v == 1 &&
				log.count(is(cm.ClusterOnline, "fleet/a")) >= round+2
		})
		var last cm.EventType
		for _, e := range log.all() {
			if e.Child == "fleet/a" && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterDisengaged) {
				last = e.Type
			}
		}
		require.Equal(t, cm.ClusterEngaged, last, "round %d: the last word on fleet/a", round)
	}
}
