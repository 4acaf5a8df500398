package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// countingController counts its runs.
type countingController struct{ runs atomic.Int32 }

func (c *countingController) Run(context.Context) error { c.runs.Add(1); return nil }
func (c *countingController) Shutdown(context.Context)  {}
func (c *countingController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "counted", Healthy: true}
}

// leader is a manager that leads on a real API server, with one controller that
// counts its runs, and the LeaderLost events it has published.
type leader struct {
	mgr  *cm.ControllerManager
	ctrl *countingController
	mu   sync.Mutex
	lost []error
}

// startLeader starts a manager electing on the Lease default/lease of c, stopped
// when t ends, and waits until it runs.
func startLeader(t *testing.T, ctx context.Context, c *cluster.Cluster, lease string) *leader {
	t.Helper()
	yes := true
	mgr, err := cm.NewControllerManager(cm.NewContext(c.Clientset()), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: lease, LeaseNamespace: "default",
			LeaseDuration: metav1.Duration{Duration: leaseDuration},
			RenewDeadline: metav1.Duration{Duration: renewDeadline},
			RetryPeriod:   metav1.Duration{Duration: retryPeriod},
		},
	}, "", cm.WithIdentity("leader"), cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	l := &leader{mgr: mgr, ctrl: &countingController{}}
	t.Cleanup(mgr.Subscribe(func(e cm.Event) {
		if e.Type == cm.LeaderLost {
			l.mu.Lock()
			l.lost = append(l.lost, e.Err)
			l.mu.Unlock()
		}
	}))
	mgr.Add(l.ctrl)
	require.NoError(t, mgr.Start(ctx, time.Minute))
	t.Cleanup(func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		mgr.ShutdownAndWait(stopCtx)
	})
	return l
}

// heldThroughout checks that the leader never lost the Lease to what the test did
// (what), never restarted its controller, and still runs.
func (l *leader) heldThroughout(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.lost, "the leader lost its Lease to %s", what)
	require.Equal(t, int32(1), l.ctrl.runs.Load(), "the controller was started again")
	st, err := l.mgr.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, cm.Phase("Running"), st.Phase)
}

// TestLeaseAnnotatedWhileHeld annotates the held Lease on a real API server, as
// `kubectl annotate lease` or a GitOps tool does, three times. Each annotation makes
// the leader's next renewal, written from the version it wrote last, a 409 Conflict.
// The Lease still names the leader in the same term, so it must renew from the version
// it reads back, keep the annotation, and neither lose the lease nor restart anything;
// it lost the lease, and fenced every controller, on each of them.
func TestLeaseAnnotatedWhileHeld(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	holder := startLeader(t, ctx, c, "annotated")

	leases := c.Clientset().CoordinationV1().Leases("default")
	for round := range 3 {
		var annotated *coordinationv1.Lease
		// As kubectl does: read, write, and again on a conflict with a renewal.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(ctx, "annotated", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations["example.com/touched"] = fmt.Sprint(round)
			annotated, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
		require.NoError(t, err, "round %d", round)
		// Wait for two renewals after the annotation: the first is the one refused
		// and redone from the version read back.
		renewed := annotated.Spec.RenewTime.Time
		for range 2 {
			require.Eventually(t, func() bool {
				cur, err := leases.Get(ctx, "annotated", metav1.GetOptions{})
				if err != nil || cur.Spec.RenewTime == nil || !cur.Spec.RenewTime.After(renewed) {
					return false
				}
				renewed = cur.Spec.RenewTime.Time
				return true
			}, 4*renewDeadline, retryPeriod/5, "round %d: the leader stopped renewing", round)
		}
	}

	l, err := leases.Get(ctx, "annotated", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "leader", *l.Spec.HolderIdentity)
	require.Equal(t, "2", l.Annotations["example.com/touched"], "the renewals wrote over the annotation")
	holder.heldThroughout(t, ctx, "an annotation")
}

// TestLeaseDeletedWhileHeld deletes the held Lease on a real API server, as `kubectl
// delete lease` does. The leader's next renewal creates it again in the same term, as
// client-go's elector does: no LeaderLost, nothing restarted. It used to lose the lease
// at its renew deadline, and no replica ever created it again.
func TestLeaseDeletedWhileHeld(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	holder := startLeader(t, ctx, c, "deleted")

	leases := c.Clientset().CoordinationV1().Leases("default")
	before, err := leases.Get(ctx, "deleted", metav1.GetOptions{})
	require.NoError(t, err)
	for round := range 2 {
		deleted := time.Now()
		require.NoError(t, leases.Delete(ctx, "deleted", metav1.DeleteOptions{}), "round %d", round)
		var again *coordinationv1.Lease
		require.Eventually(t, func() bool {
			again, err = leases.Get(ctx, "deleted", metav1.GetOptions{})
			return err == nil
		}, 4*renewDeadline, retryPeriod/5, "round %d: nobody created the Lease again", round)
		t.Logf("round %d: created again %s after the deletion", round, time.Since(deleted).Round(time.Millisecond))
		require.Equal(t, "leader", *again.Spec.HolderIdentity)
		require.Equal(t, *before.Spec.LeaseTransitions, *again.Spec.LeaseTransitions, "a new term")
		require.True(t, before.Spec.AcquireTime.Equal(again.Spec.AcquireTime), "a new term")
	}
	// Two more renewals: it goes on renewing the Lease it created.
	renewed := time.Time{}
	for range 2 {
		require.Eventually(t, func() bool {
			cur, err := leases.Get(ctx, "deleted", metav1.GetOptions{})
			if err != nil || cur.Spec.RenewTime == nil || !cur.Spec.RenewTime.After(renewed) {
				return false
			}
			renewed = cur.Spec.RenewTime.Time
			return true
		}, 4*renewDeadline, retryPeriod/5, "the leader stopped renewing")
	}
	holder.heldThroughout(t, ctx, "a deletion")
}
