package controllermanager_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// fencedAtShutdown is a member's controller that, when shut down, tries
// one write through its Cluster's Config and keeps the answer.
type fencedAtShutdown struct {
	cluster cm.Cluster
	mu      sync.Mutex
	wrote   []error // one per Shutdown
}

func (c *fencedAtShutdown) Name() string                  { return "ctrl" }
func (c *fencedAtShutdown) Run(ctx context.Context) error { return nil }
func (c *fencedAtShutdown) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

func (c *fencedAtShutdown) Shutdown(context.Context) {
	err := errors.New("no client")
	if client, cerr := rest.HTTPClientFor(c.cluster.Config()); cerr == nil {
		req, _ := http.NewRequest(http.MethodPost, c.cluster.Config().Host+"/api/v1/namespaces/default/configmaps", strings.NewReader("{}"))
		var resp *http.Response
		if resp, err = client.Do(req); err == nil {
			resp.Body.Close()
		}
		client.CloseIdleConnections()
	}
	c.mu.Lock()
	c.wrote = append(c.wrote, err)
	c.mu.Unlock()
}

// A disengaged member's writes are refused before its controllers are
// stopped: a write its controller sends while it stops (a reconcile told
// to stop, a Shutdown that cleans up) fails with ErrClusterDisengaged and
// never reaches the member, as a lost lease fences before it stops. Found
// from ctrlruntime/fleet (TestEnvAttackDisengageMidReconcile): the
// Cluster's Context, which fences its Config, ended only once the group
// had been removed, after every Shutdown under it had returned.
func TestFleetDisengageFencesWritesBeforeItStops(t *testing.T) {
	a, prov, built, log := fencedFleetOnline(t)

	prov.Disengage(t, "a")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	ctrls := built()
	require.Len(t, ctrls, 1)
	ctrls[0].mu.Lock()
	defer ctrls[0].mu.Unlock()
	require.Len(t, ctrls[0].wrote, 1, "the controller's Shutdown ran once")
	require.ErrorIs(t, ctrls[0].wrote[0], cm.ErrClusterDisengaged, "a write from the controller's Shutdown, after the disengage")
	require.Zero(t, a.writes.Load(), "a write reached the member")
}

// A rotated member's old subtree is fenced before it is stopped, as a
// disengaged one is (TestFleetDisengageFencesWritesBeforeItStops): a
// write the old subtree's controller sends as it stops fails with
// ErrClusterDisengaged and never reaches the member on the replaced
// credentials. Before, the old Cluster's Context ended only once its group
// had been removed (as the new config was applied), after every Shutdown
// under it had returned.
func TestFleetRotationFencesWritesBeforeItStops(t *testing.T) {
	a, prov, built, log := fencedFleetOnline(t)

	rotated := a.config()
	rotated.BearerToken = "token-2"
	require.NoError(t, prov.Engage(t, "a", rotated))
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/a"))
	ctrls := built()
	require.Len(t, ctrls, 2, "built once more, on the new config")
	ctrls[0].mu.Lock()
	defer ctrls[0].mu.Unlock()
	require.Len(t, ctrls[0].wrote, 1, "the old controller's Shutdown ran once")
	require.ErrorIs(t, ctrls[0].wrote[0], cm.ErrClusterDisengaged, "a write from the old controller's Shutdown, after the rotation")
	require.Zero(t, a.writes.Load(), "a write reached the member")
}

// fencedFleetOnline starts a fleet of one member, a, Online, whose build
// gives each Cluster one fencedAtShutdown; built is what it built so far.
func fencedFleetOnline(t *testing.T) (a *fakeMember, prov *handProvider, built func() []*fencedAtShutdown, log *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a = newFakeMember(t, memberOK)
	prov = newHandProvider(map[string]*rest.Config{"a": a.config()})
	var mu sync.Mutex
	var ctrls []*fencedAtShutdown
	fleet := cm.NewFleet("fleet", prov, func(c cm.Cluster) []cm.Runnable {
		ctrl := &fencedAtShutdown{cluster: c}
		mu.Lock()
		ctrls = append(ctrls, ctrl)
		mu.Unlock()
		return []cm.Runnable{ctrl}
	}, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	built = func() []*fencedAtShutdown {
		mu.Lock()
		defer mu.Unlock()
		return append([]*fencedAtShutdown(nil), ctrls...)
	}
	return a, prov, built, log
}
