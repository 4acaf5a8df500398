package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaseStore is where the Elector reads and writes its Leases: the API
// server's Lease client, or a client-go lock (Config.Lock). Update is
// optimistic where the store keeps versions (the API server, a lock): it
// fails with a conflict unless l.ResourceVersion is still the stored
// version. client-go's fake clientsets keep none (Elector.update).
type leaseStore interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

var leasesResource = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}

// update writes l over decided, the version of its Lease the loop decided
// on, from a write's goroutine. It reads first (client-go's
// tryAcquireOrRenew) when read says so, and always where decided has no
// resourceVersion (a fake clientset): a Lease no longer decided comes back
// with a conflict, unwritten. Elsewhere the API server's precondition is
// the check (rules 1, 2 and, without versions, 5 of "Read before write" in
// docs/leader-election.md).
func (e *Elector) update(ctx context.Context, decided, l *coordinationv1.Lease, read bool) (*coordinationv1.Lease, error) {
	if read || decided.ResourceVersion == "" {
		cur, err := e.store.Get(ctx, decided.Name)
		if err != nil {
			return nil, err
		}
		if !sameVersion(cur, decided) {
			return cur, apierrors.NewConflict(leasesResource, decided.Name, errors.New("the Lease changed since it was read"))
		}
	}
	return e.store.Update(ctx, l)
}

// clientStore is the API server's Lease client.
type clientStore struct {
	leases coordinationv1client.LeaseInterface
}

func (c clientStore) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return c.leases.Get(ctx, name, metav1.GetOptions{})
}

func (c clientStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.leases.Create(ctx, l, metav1.CreateOptions{})
}

func (c clientStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return c.leases.Update(ctx, l, metav1.UpdateOptions{})
}

// lockStore is a client-go lock, which knows one record and no versions:
// the version of a record is a hash of its bytes as the lock gives them
// (Get's raw record, client-go's own change detector). An Update reads the
// record first and refuses, with a conflict, to write over one that is not
// the version it was decided on: client-go's tryAcquireOrRenew's check,
// the lock's own optimistic write covering the gap between the two calls.
type lockStore struct {
	mu              sync.Mutex // a lock is not safe for concurrent use (LeaseLock caches the Lease it last read)
	lock            resourcelock.Interface
	namespace, name string
}

func (s *lockStore) Get(ctx context.Context, _ string) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(ctx)
}

func (s *lockStore) get(ctx context.Context) (*coordinationv1.Lease, error) {
	rec, raw, err := s.lock.Get(ctx)
	if err != nil {
		return nil, err
	}
	return s.lease(rec, raw), nil
}

func (s *lockStore) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(ctx, l, s.lock.Create)
}

func (s *lockStore) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	if cur.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(leasesResource, l.Name,
			fmt.Errorf("the lock's record changed since version %s", l.ResourceVersion))
	}
	return s.write(ctx, l, s.lock.Update)
}

// write writes l's record with write and returns the Lease as the lock
// will give it back.
func (s *lockStore) write(ctx context.Context, l *coordinationv1.Lease, write func(context.Context, resourcelock.LeaderElectionRecord) error) (*coordinationv1.Lease, error) {
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	if err := write(ctx, *rec); err != nil {
		return nil, err
	}
	spec := resourcelock.LeaderElectionRecordToLeaseSpec(rec)
	raw, err := json.Marshal(*resourcelock.LeaseSpecToLeaderElectionRecord(&spec))
	if err != nil {
		return nil, err
	}
	return s.lease(rec, raw), nil
}

func (s *lockStore) lease(rec *resourcelock.LeaderElectionRecord, raw []byte) *coordinationv1.Lease {
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, ResourceVersion: fmt.Sprintf("%016x", h.Sum64())},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(rec),
	}
}

// poll reads the lock's record every RetryPeriod and forwards it to the
// loop as if a watch had shown it, until ctx ends: a lock has no watch.
func (e *Elector) poll(ctx context.Context) {
	for ctx.Err() == nil {
		l, err := readWithin(ctx, e.cfg.RenewDeadline, func(ctx context.Context) (*coordinationv1.Lease, error) { return e.store.Get(ctx, e.cfg.Name) })
		var m any
		switch {
		case err == nil:
			m = leaseSeen{lease: l}
		case apierrors.IsNotFound(err):
			m = listed{}
		default:
			e.cfg.Logger.Warn("cannot read the lock", "lock", e.cfg.Lock.Describe(), "err", err)
		}
		if m != nil && !e.forward(ctx, m) {
			return
		}
		select {
		case <-e.cfg.Clock.After(e.cfg.RetryPeriod):
		case <-ctx.Done():
		}
	}
}
