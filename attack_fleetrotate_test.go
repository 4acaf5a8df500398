package controllermanager_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// A config rotated while the member's loop is still building the subtree
// of the config engaged before (a build that takes its time: a cache
// warmed, a client made). docs/fleet.md: a changed config "restarts the
// subtree once, on the new config"; the events of a cluster come in order,
// each ClusterOnline announcing the config last engaged
// (TestFleetEventsOfAClusterComeInOrder). Before, the loop went on with
// the old config once its build returned: it added the old subtree,
// started its controllers on the old credentials after the provider had
// replaced them, announced it Online (Clusters() said Online, for the old
// config, overwriting the new config's Engaging), then tore it down and
// built the new one: two ClusterOnline for one engage.
func TestAttackFleetRotatedDuringBuild(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(nil)
	bl := newBuilds()
	building := make(chan struct{})
	release := make(chan struct{})
	build := func(c cm.Cluster) []cm.Runnable {
		if c.Config().BearerToken == "token-1" {
			close(building)
			<-release
		}
		return bl.build(c)
	}
	fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	old := a.config()
	require.NoError(t, prov.Engage(t, "a", old))
	awaitRecv(t, building, "the build of token-1")
	require.NoError(t, prov.Engage(t, "a", &rest.Config{Host: a.srv.URL, BearerToken: "token-2"}))
	close(release)
	// Settle: a build on token-2 runs.
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		for _, c := range bl.of("a") {
			if c.cluster.Config().BearerToken == "token-2" && c.runs.Load() > 0 {
				st, ok := fleet.Cluster("a")
				// events reach a subscriber after the state they report
				return ok && st.State == cm.ClusterStateOnline && log.count(is(cm.ClusterOnline, "fleet/a")) > 0
			}
		}
		return false
	})
	var order []cm.EventType
	for _, e := range log.all() {
		if e.Child == "fleet/a" && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterOnline) {
			order = append(order, e.Type)
		}
	}
	for i, c := range bl.of("a") {
		if c.cluster.Config().BearerToken == "token-1" {
			require.Zero(t, c.runs.Load(), "build %d on the replaced config token-1 ran", i)
		}
	}
	require.Equal(t, []cm.EventType{cm.ClusterEngaged, cm.ClusterEngaged, cm.ClusterOnline}, order)
}

// rotatingCtrl is the controller of the first config's build: the first
// call of its Name (the supervisor naming the subtree's children, once the
// member's loop has sent its AddChild) runs rotate: an engage that lands
// after the loop's last look at what is wanted and before the supervisor
// takes the add.
type rotatingCtrl struct {
	*clusterCtrl
	once   sync.Once
	rotate func()
}

func (c *rotatingCtrl) Name() string {
	c.once.Do(c.rotate)
	return c.clusterCtrl.Name()
}

// firstBuildRotates builds as bl does, and wraps the controller of the
// member's first build only in a rotatingCtrl that runs rotate. first
// returns that controller (nil before the first build).
func firstBuildRotates(bl *builds, rotate func()) (build func(cm.Cluster) []cm.Runnable, first func() *rotatingCtrl) {
	var mu sync.Mutex
	var wrapped *rotatingCtrl
	build = func(c cm.Cluster) []cm.Runnable {
		rs := bl.build(c)
		mu.Lock()
		defer mu.Unlock()
		if wrapped != nil {
			return rs
		}
		wrapped = &rotatingCtrl{clusterCtrl: rs[0].(*clusterCtrl), rotate: rotate}
		return []cm.Runnable{wrapped}
	}
	first = func() *rotatingCtrl {
		mu.Lock()
		defer mu.Unlock()
		return wrapped
	}
	return build, first
}

// A config rotated after the member's loop has built the old config's
// subtree and checked that it is still wanted, but before the supervisor
// has taken the add. The subtree of the replaced config is not added: the
// supervisor asks, as it accepts the add, whether that config is still
// wanted (under the lock the engage takes), and refuses it when not.
//
// Before, the old subtree was added and its controller started on the
// replaced credentials, then removed by the next step (neither announced
// nor kept, but run).
func TestAttackFleetRotatedDuringItsAdd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(nil)
	bl := newBuilds()
	var mu sync.Mutex
	var olds []*rotatingCtrl
	build := func(c cm.Cluster) []cm.Runnable {
		rs := bl.build(c)
		if c.Config().BearerToken != "token-1" {
			return rs
		}
		old := &rotatingCtrl{clusterCtrl: rs[0].(*clusterCtrl), rotate: func() {
			prov.mu.Lock()
			engage := prov.engage
			prov.mu.Unlock()
			if err := engage("a", &rest.Config{Host: a.srv.URL, BearerToken: "token-2"}); err != nil {
				panic(err)
			}
		}}
		mu.Lock()
		olds = append(olds, old)
		mu.Unlock()
		return []cm.Runnable{old}
	}
	fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	require.NoError(t, prov.Engage(t, "a", a.config()))
	log.waitUntil(t, clk, fleetPeriod, func() bool {
		for _, c := range bl.of("a") {
			if c.cluster.Config().BearerToken == "token-2" && c.runs.Load() > 0 {
				st, ok := fleet.Cluster("a")
				return ok && st.State == cm.ClusterStateOnline && log.count(is(cm.ClusterOnline, "fleet/a")) > 0
			}
		}
		return false
	})
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, olds, "token-1's subtree was never built")
	for i, c := range olds {
		require.Zero(t, c.runs.Load(), "build %d on the replaced config token-1 ran", i)
	}
	var order []cm.EventType
	for _, e := range log.all() {
		if e.Child == "fleet/a" && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterOnline) {
			order = append(order, e.Type)
		}
	}
	require.Equal(t, []cm.EventType{cm.ClusterEngaged, cm.ClusterEngaged, cm.ClusterOnline}, order)
}
