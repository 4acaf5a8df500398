package controllermanager_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// A member whose kubeconfig does not authenticate (its API server answers
// 401) is Offline, its event, its status and its ChildStatus naming the
// refusal, and nothing else is disturbed; rotated to credentials that
// authenticate, it comes Online and its subtree runs.
func TestFleetMemberThatDoesNotAuthenticate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	locked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(locked.Close)
	ok := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"ok": ok.config(), "locked": {Host: locked.URL, BearerToken: "stale"}})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)

	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/ok"))
	off := log.waitFor(t, nil, 0, is(cm.ClusterOffline, "fleet/locked"))
	require.ErrorContains(t, off.Err, "401")
	st, found := fleet.Cluster("locked")
	require.True(t, found)
	require.Equal(t, cm.ClusterStateOffline, st.State)
	require.ErrorContains(t, st.Err, "401", "its status names the refusal")
	require.Empty(t, bl.of("locked"), "nothing is built for a member that never answered")
	status, err := mgr.Status(context.Background())
	require.NoError(t, err)
	leaf, running := status.Child("fleet/ok/ctrl")
	require.True(t, running)
	require.Equal(t, supervisor.StateRunning, leaf.State, "the other member runs")

	// Rotated to credentials that authenticate.
	require.NoError(t, prov.Engage(t, "locked", &rest.Config{Host: locked.URL, BearerToken: "good"}))
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOnline, "fleet/locked"))
	leaf, running = fleetChild(t, mgr, "fleet/locked/ctrl")
	require.True(t, running)
	require.Equal(t, supervisor.StateRunning, leaf.State)
	require.Zero(t, bl.of("ok")[0].stops.Load(), "ok was not disturbed")
}
