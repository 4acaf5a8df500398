package controllermanager_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/supervisor"
)

// clientsCtrl is a member's controller whose first Run makes two HTTP
// clients on its Cluster's config, as a worker it leaves running past its
// Shutdown would: one on Config() as it is, one wrapped with the
// incarnation's own guard (LeaseGuard of Run's context).
type clientsCtrl struct {
	cluster       cm.Cluster
	mu            sync.Mutex
	runs          int
	plain, scoped *http.Client
}

func (c *clientsCtrl) Run(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs++
	if c.runs > 1 {
		return nil
	}
	var err error
	if c.plain, err = rest.HTTPClientFor(c.cluster.Config()); err != nil {
		return err
	}
	cfg := c.cluster.Config()
	g, _ := cm.LeaseGuard(ctx)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(g, rt) })
	c.scoped, err = rest.HTTPClientFor(cfg)
	return err
}
func (c *clientsCtrl) Shutdown(context.Context) {}
func (c *clientsCtrl) Name() string             { return "ctrl" }
func (c *clientsCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

// A Cluster's config is the member's, shared by its children and by
// their incarnations: its writes pass while this replica holds the
// member's shard, whichever incarnation sends them. So a worker left
// running past its controller's Shutdown writes through it again once the
// lease is back after a re-election (found by a review). docs/fleet.md
// says so, and how to scope a client to the incarnation: wrap the config
// with the LeaseGuard of Run's context, which fails for ever once that
// incarnation's Shutdown has returned. This test holds both halves.
func TestFleetClusterConfigScopedToAnIncarnationRefusesItsWorkerAfterAReelection(t *testing.T) {
	a := newFakeMember(t, memberOK)
	ctrl := &clientsCtrl{}
	f := &electedFleet{}
	f.start(t, cm.LeaseLostReelect, 1, a, nil, func(c cm.Cluster) []cm.Runnable {
		ctrl.cluster = c
		return []cm.Runnable{ctrl}
	})
	m, client := f.m, f.client
	runs := func() int {
		ctrl.mu.Lock()
		defer ctrl.mu.Unlock()
		return ctrl.runs
	}
	pollUntil(t, elWait, func() string {
		if runs() == 0 {
			return "not run"
		}
		return ""
	})
	post := func(c *http.Client) error {
		req, err := http.NewRequest(http.MethodPost, a.config().Host+"/api/v1/namespaces/default/configmaps", strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, post(ctrl.plain), "while leading")
	require.NoError(t, post(ctrl.scoped), "while leading")

	client.Partition(true)
	pollUntil(t, 3*elWait, func() string {
		if managerPhase(m) == supervisor.PhaseRunning {
			return "still running"
		}
		return ""
	})
	require.ErrorIs(t, post(ctrl.plain), lease.ErrNotHeld, "stood down")
	client.Partition(false)
	pollUntil(t, 3*elWait, func() string {
		if runs() < 2 {
			return "not run again"
		}
		return ""
	})
	require.NoError(t, post(ctrl.plain), "the Cluster's config follows the lease, not the incarnation")
	require.ErrorIs(t, post(ctrl.scoped), lease.ErrNotHeld, "incarnation 1's scoped client wrote after the re-election")
}
