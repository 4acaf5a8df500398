package controllermanager_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/liveview"
	"github.com/actorkube/controllermanager/supervisor"
)

// A member cluster's group shows in Status as Kind "cluster", with where
// the cluster stands (state, last probe, its error), and the live view's
// JSON carries the same; its children are found through it as through a
// group's.
func TestFleetStatusShowsEachClusterAsKindCluster(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	b.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/b"))

	st, err := mgr.Status(context.Background())
	require.NoError(t, err)
	fl, ok := st.Child("fleet")
	require.True(t, ok)
	require.Equal(t, actors.KindGroup, fl.Kind, "the fleet itself is a group")
	require.Nil(t, fl.Cluster)

	ca, ok := st.Child("fleet/a")
	require.True(t, ok)
	require.Equal(t, actors.KindCluster, ca.Kind)
	require.NotNil(t, ca.Group, "a cluster is a group: its supervision shows")
	require.NotNil(t, ca.Cluster)
	require.Equal(t, string(cm.ClusterStateOnline), ca.Cluster.State)
	require.False(t, ca.Cluster.LastProbe.IsZero(), "probed")
	require.Empty(t, ca.Cluster.ProbeError)
	require.Equal(t, -1, ca.Cluster.Shard, "no shards")
	require.Equal(t, supervisor.StateRunning, ca.State)
	leaf, ok := st.Child("fleet/a/ctrl")
	require.True(t, ok, "a cluster's children are found through it")
	require.Equal(t, supervisor.StateRunning, leaf.State)

	cb, ok := st.Child("fleet/b")
	require.True(t, ok)
	require.Equal(t, actors.KindCluster, cb.Kind)
	require.Equal(t, string(cm.ClusterStateOffline), cb.Cluster.State)
	require.Contains(t, cb.Cluster.ProbeError, "500")
	require.NotEmpty(t, cb.Cluster.Error)
	require.Equal(t, supervisor.StateStopped, cb.State, "an Offline cluster's subtree is stopped")

	// The supervision events of a member's group say "cluster" too, as
	// the fleet's own events and Status do: here its stop for the outage.
	e, ok := log.find(is(cm.ChildStopped, "fleet/b"))
	require.True(t, ok, "ChildStopped of fleet/b")
	require.Equal(t, cm.KindCluster, e.Kind, "ChildStopped of fleet/b")

	// The live view's JSON: the same, by name.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, liveview.DefaultPrefix+"/status.json", nil)
	req.Host = "127.0.0.1"
	liveview.Handler(mgr).ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body := rec.Body.String()
	for _, want := range []string{`"kind":"cluster"`, `"cluster":{"state":"Online"`, `"cluster":{"state":"Offline"`} {
		require.Contains(t, body, want)
	}

	// The pod's readiness passes with a member down.
	rec = httptest.NewRecorder()
	health.NewHandler(mgr).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz?verbose", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}
