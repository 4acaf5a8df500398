package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const wait = 5 * time.Second

func newLease(name, group, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"group": group}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}

// next returns the next event of w, failing the test if none comes.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		require.True(t, ok, "watch closed")
		return ev
	case <-time.After(wait):
		t.Fatal("no event")
		return watch.Event{}
	}
}

func holderOf(ev watch.Event) string {
	return *ev.Object.(*coordinationv1.Lease).Spec.HolderIdentity
}

func TestListAndWatchSelectAndResume(t *testing.T) {
	ctx := context.Background()
	s := NewServer()
	c := s.Client("a")
	leases := c.CoordinationV1().Leases("ns")
	for _, l := range []*coordinationv1.Lease{newLease("x-0", "x", "a"), newLease("x-1", "x", ""), newLease("y-0", "y", "b")} {
		_, err := leases.Create(ctx, l, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := c.CoordinationV1().Leases("other").Create(ctx, newLease("x-9", "x", "c"), metav1.CreateOptions{})
	require.NoError(t, err)

	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "group=x"})
	require.NoError(t, err)
	var names []string
	for _, l := range list.Items {
		names = append(names, l.Name)
	}
	assert.Equal(t, []string{"x-0", "x-1"}, names)
	assert.Equal(t, "4", list.ResourceVersion)

	// A write between the list and the watch is not lost.
	cur, err := leases.Get(ctx, "x-1", metav1.GetOptions{})
	require.NoError(t, err)
	b := "b"
	cur.Spec.HolderIdentity = &b
	_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = leases.Update(ctx, newLease("y-0", "y", "z"), metav1.UpdateOptions{}) // stale: refused, not sent
	require.True(t, apierrors.IsConflict(err), "%v", err)

	w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: "group=x", ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	ev := next(t, w)
	assert.Equal(t, watch.Modified, ev.Type)
	assert.Equal(t, "b", holderOf(ev))

	// Steal is seen; the other group and namespace are not.
	_, err = c.CoordinationV1().Leases("other").Update(ctx, mustGet(t, c, "other", "x-9"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, s.Steal("ns", "y-0", "thief", time.Second))
	require.NoError(t, s.Steal("ns", "x-0", "thief", time.Second))
	ev = next(t, w)
	assert.Equal(t, "x-0", ev.Object.(*coordinationv1.Lease).Name)
	assert.Equal(t, "thief", holderOf(ev))

	// A new Lease is Added.
	_, err = leases.Create(ctx, newLease("x-2", "x", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	ev = next(t, w)
	assert.Equal(t, watch.Added, ev.Type)
	assert.Equal(t, "x-2", ev.Object.(*coordinationv1.Lease).Name)
}

func mustGet(t *testing.T, c *Client, ns, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func TestWatchFromNowSendsTheCurrentLeasesFirst(t *testing.T) {
	ctx := context.Background()
	s := NewServer()
	c := s.Client("a")
	leases := c.CoordinationV1().Leases("ns")
	_, err := leases.Create(ctx, newLease("x-0", "x", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=x-0"})
	require.NoError(t, err)
	defer w.Stop()
	ev := next(t, w)
	assert.Equal(t, watch.Added, ev.Type)
	assert.Equal(t, "a", holderOf(ev))

	_, err = leases.Watch(ctx, metav1.ListOptions{ResourceVersion: "99"})
	require.True(t, apierrors.IsResourceExpired(err), "%v", err)
}

func TestPartitionStopsWatches(t *testing.T) {
	ctx := context.Background()
	s := NewServer()
	a, b := s.Client("a"), s.Client("b")
	_, err := a.CoordinationV1().Leases("ns").Create(ctx, newLease("x-0", "x", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	wa, err := a.CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	defer wa.Stop()
	wb, err := b.CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	defer wb.Stop()

	a.Partition(true)
	select {
	case _, ok := <-wa.ResultChan():
		assert.False(t, ok, "a partitioned client's watch delivers nothing")
	case <-time.After(wait):
		t.Fatal("a partitioned client's watch is still open")
	}
	_, err = a.CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{})
	require.ErrorIs(t, err, ErrPartitioned)

	require.NoError(t, s.Steal("ns", "x-0", "thief", time.Second))
	assert.Equal(t, "thief", holderOf(next(t, wb)), "the other client still watches")

	a.Partition(false)
	wa2, err := a.CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	require.NoError(t, err)
	defer wa2.Stop()
	assert.Equal(t, "thief", holderOf(next(t, wa2)), "reconnected, it resumes from its version")
}

// TestDeleteIsADeletedEvent: a deleted Lease is gone for get and list, its
// watchers get a Deleted event with its last version, and a watch resumed
// from before the deletion replays it; it can be created again.
func TestDeleteIsADeletedEvent(t *testing.T) {
	ctx := context.Background()
	s := NewServer()
	c := s.Client("a")
	leases := c.CoordinationV1().Leases("ns")
	created, err := leases.Create(ctx, newLease("x-0", "x", "a"), metav1.CreateOptions{})
	require.NoError(t, err)
	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()

	require.NoError(t, leases.Delete(ctx, "x-0", metav1.DeleteOptions{}))
	ev := next(t, w)
	assert.Equal(t, watch.Deleted, ev.Type)
	assert.Equal(t, "a", holderOf(ev))
	_, err = leases.Get(ctx, "x-0", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "get after delete: %v", err)
	list, err := leases.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, list.Items)
	assert.True(t, apierrors.IsNotFound(leases.Delete(ctx, "x-0", metav1.DeleteOptions{})))

	resumed, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	require.NoError(t, err)
	defer resumed.Stop()
	assert.Equal(t, watch.Deleted, next(t, resumed).Type)

	_, err = leases.Create(ctx, newLease("x-0", "x", "b"), metav1.CreateOptions{})
	require.NoError(t, err)
	ev = next(t, w)
	assert.Equal(t, watch.Added, ev.Type)
	assert.Equal(t, "b", holderOf(ev))
}
