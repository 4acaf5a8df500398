package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// leaseRecord is one version of the Lease as written to the API server.
type leaseRecord struct {
	resourceVersion string
	holder          string
	duration        time.Duration
	acquired        time.Time // spec.acquireTime: the holder's clock when it acquired
	renewed         time.Time // spec.renewTime: the holder's clock when it wrote this version
	transitions     int32
}

// expires is when a standby could take this version over at the earliest: a standby
// waits LeaseDuration from the moment it observed the version, which is no earlier than
// the moment the holder wrote it.
func (r leaseRecord) expires() time.Time { return r.renewed.Add(r.duration) }

// leaseWatch records every version of one Lease, in order, from a watch that resumes
// where it broke off (a paused API server, a closed stream): watch events carry every
// version, so none is missed, not even a renewal whose response never reached its writer.
type leaseWatch struct {
	mu      sync.Mutex
	records []leaseRecord
}

// watchLease records the versions of the Lease namespace/name until t ends.
func watchLease(t *testing.T, client kubernetes.Interface, namespace, name string) *leaseWatch {
	w := &leaseWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, client, namespace, name)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *leaseWatch) run(ctx context.Context, client kubernetes.Interface, namespace, name string) {
	runLeaseWatch(ctx, client, namespace, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	}, w.add)
}

// runLeaseWatch calls add with every version of the Leases of namespace that opts
// selects, in order, until ctx ends, resuming the watch where it broke off.
func runLeaseWatch(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions, add func(*coordinationv1.Lease)) {
	leases := client.CoordinationV1().Leases(namespace)
	resourceVersion := "" // "": the current version first, then every change
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for ctx.Err() == nil {
		opts.ResourceVersion = resourceVersion
		watcher, err := leases.Watch(ctx, opts)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
			continue
		}
		for ev := range watcher.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				lease := ev.Object.(*coordinationv1.Lease)
				resourceVersion = lease.ResourceVersion
				add(lease)
			case watch.Error: // e.g. 410 Gone: start over from the current version
				resourceVersion = ""
			}
		}
		watcher.Stop()
	}
}

func (w *leaseWatch) add(lease *coordinationv1.Lease) {
	r := leaseRecord{resourceVersion: lease.ResourceVersion}
	if h := lease.Spec.HolderIdentity; h != nil {
		r.holder = *h
	}
	if d := lease.Spec.LeaseDurationSeconds; d != nil {
		r.duration = time.Duration(*d) * time.Second
	}
	if a := lease.Spec.AcquireTime; a != nil {
		r.acquired = a.Time
	}
	if rt := lease.Spec.RenewTime; rt != nil {
		r.renewed = rt.Time
	}
	if tr := lease.Spec.LeaseTransitions; tr != nil {
		r.transitions = *tr
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.records); n > 0 && w.records[n-1].resourceVersion == r.resourceVersion {
		return // the same version again, after a resumed watch
	}
	w.records = append(w.records, r)
}

// snapshot returns the versions recorded so far.
func (w *leaseWatch) snapshot() []leaseRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]leaseRecord(nil), w.records...)
}

// lastRenewalBefore is the last version holder wrote with a renew time before t.
func (w *leaseWatch) lastRenewalBefore(holder string, t time.Time) (leaseRecord, bool) {
	var last leaseRecord
	found := false
	for _, r := range w.snapshot() {
		if r.holder == holder && r.renewed.Before(t) && (!found || r.renewed.After(last.renewed)) {
			last, found = r, true
		}
	}
	return last, found
}
