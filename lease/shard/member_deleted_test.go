package shard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// failedMemberUpdates counts the member Lease updates that fail.
type failedMemberUpdates struct {
	leaseStore
	n *atomic.Int64
}

func (s failedMemberUpdates) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	got, err := s.leaseStore.Update(ctx, l)
	if strings.Contains(l.Name, "-member-") && err != nil {
		s.n.Add(1)
	}
	return got, err
}

// A replica stopped after its member Lease was deleted (by an operator, a
// GitOps prune), before its next renewal created it again, releases
// nothing: there is nothing to release. Found by a read (stop 57): the
// release adopted the deleted Lease's last copy, its update failed
// NotFound, and the answer, the replica stopping, released again: 165,659
// failed updates in 8 s, and Run could not return while one was in flight.
func TestStopAfterMemberLeaseDeletedWritesItOnce(t *testing.T) {
	g := newGroup(t, 4)
	var failed atomic.Int64
	g.wrap = func(st leaseStore) leaseStore { return failedMemberUpdates{st, &failed} }
	g.start("a")
	g.start("b")
	g.settleStepping("a and b", 4*int(leaseDuration/retryPeriod))
	require.NoError(t, g.admin().Delete(context.Background(), MemberLease(testGroup, "b"), metav1.DeleteOptions{}))
	r := g.replicas["b"]
	latest := g.server.LatestVersion()
	require.Eventually(t, func() bool { return r.e.shown.Load() >= latest }, wait, poll, "b's watch shows the deletion")
	g.stop("b")
	// At most the release of the copy it wrote last, refused NotFound.
	require.LessOrEqual(t, failed.Load(), int64(1), "failed updates of b's deleted member Lease")
}
