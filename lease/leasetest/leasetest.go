// Package leasetest is a fake API server for coordination.k8s.io/v1 Leases,
// for tests of leader election. Unlike the plain fake clientset, it rejects
// an update that carries a stale resourceVersion with 409 Conflict, as the
// real API server does: without that, a leader whose lease was taken over
// would overwrite the new holder on its next renewal and never notice the
// loss. Each replica gets a clientset of its own (Server.Client), which can
// be cut off from the server to simulate a network partition. Leases can be
// listed and watched too, as informers and watch-driven electors need (see
// watch.go); a partition stops the client's watches.
//
// # Which fakes a manager's election runs on
//
// A ControllerManager's election (package lease/shard's Elector) runs on
// three in-memory API servers, and passes the same tests on each
// (election_fakes_test.go in the root package: handover within a few retry
// periods, never two holders, with live watches and with watches that stop
// delivering):
//
//   - this package, the one to test election with: every write gets a new
//     resourceVersion and a stale one is refused, as on the API server, so
//     a race between two replicas ends in 409 Conflict for one of them and
//     nothing is ever overwritten; it adds partitions, latency, Steal and
//     History;
//   - client-go's fake.NewClientset and fake.NewSimpleClientset, the usual
//     unit-test clientsets, supported so that a manager in a user's own
//     tests behaves: they leave every Lease's resourceVersion empty and
//     take any update. The Elector then tells versions apart by their
//     record (holder, times, transitions) and reads the Lease before each
//     write, refusing to write over a record that is not the one it
//     decided on, as client-go's LeaderElector does. The instant between
//     that read and the write, which a fake that checks no version cannot
//     close, is covered by reading a takeover back a third of the renew
//     deadline (at most a second) after it was written before it counts (that much more per
//     takeover), and by not counting a write that took longer than that:
//     a stall there costs a lease duration without a holder, not two
//     holders.
//     Prefer this package for tests of the election itself: it refuses
//     the second write as the API server does.
//
// # One call at a time per Client
//
// A Client is client-go's fake clientset underneath, which serves one call
// at a time (its Invokes holds one lock), Leases and everything else alike.
// A manager records its Kubernetes Events through its Context's clientset:
// when that is the same Client as its Lease's, every ShardLost and
// ShardAcquired Event (a Patch, slow on the fake under -race) holds the
// renewals up, and on a loaded machine a wave of losses feeds itself. With
// many shards, give the manager's Context a clientset of its own
// (WithLeaderElectionClient for the Client), or WithEventRecorder.
package leasetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ErrPartitioned is the error a partitioned Client's lease calls return.
var ErrPartitioned = errors.New("leasetest: client cut off from the API server")

var leases = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}

// Server holds Leases. It is safe for concurrent use.
type Server struct {
	mu      sync.Mutex
	objects map[string]*coordinationv1.Lease // by namespace/name
	version int64
	writes  []Write
	log     []logged             // every stored version, for watches that resume
	watches map[*leaseWatch]bool // open watches
}

// Write is one successful create or update of a Lease (a delete is not
// one: it shows on watches only).
type Write struct {
	Time      time.Time
	Namespace string
	Name      string
	Holder    string // the holder identity written; empty when released
	Version   string // the resourceVersion it got
	Client    string // the Client that wrote it; empty for Server.Steal
}

// NewServer returns a Server with no Lease.
func NewServer() *Server {
	return &Server{objects: map[string]*coordinationv1.Lease{}, watches: map[*leaseWatch]bool{}}
}

// Client is a clientset of its own on the server.
type Client struct {
	*fake.Clientset
	name    string
	cut     atomic.Bool
	latency atomic.Pointer[Latency]

	mu      sync.Mutex
	watches map[*leaseWatch]bool // open watches, stopped by Partition
}

// Client returns a new clientset whose Lease calls go to s; name tags its
// writes in History. Its Lease calls are get, list, create, update,
// delete and watch (see Watch in watch.go).
func (s *Server) Client(name string) *Client {
	c := &Client{Clientset: fake.NewClientset(), name: name}
	c.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if c.cut.Load() {
			return true, nil, fmt.Errorf("%w (%s %s)", ErrPartitioned, c.name, action.GetVerb())
		}
		return s.react(c.name, action)
	})
	c.PrependWatchReactor("leases", func(action k8stesting.Action) (bool, watch.Interface, error) {
		return s.watchFor(c, action)
	})
	return c
}

// Partition cuts c off from the server (every Lease call fails, and every
// watch it has open stops: its result channel is closed) or, with false,
// reconnects it.
func (c *Client) Partition(cut bool) {
	c.cut.Store(cut)
	if cut {
		c.stopWatches()
	}
}

// Partitioned reports whether c is cut off (Partition).
func (c *Client) Partitioned() bool { return c.cut.Load() }

// LatestVersion is the resourceVersion of the last write the server has
// stored (0 before the first), a number as on the API server: a test that
// steps a clock can wait until a watcher has shown it.
func (s *Server) LatestVersion() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *Server) react(client string, action k8stesting.Action) (bool, runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := action.GetNamespace()
	switch action.GetVerb() {
	case "get":
		name := action.(k8stesting.GetAction).GetName()
		cur, ok := s.objects[ns+"/"+name]
		if !ok {
			return true, nil, apierrors.NewNotFound(leases, name)
		}
		return true, cur.DeepCopy(), nil
	case "list":
		return true, s.list(ns, action.(k8stesting.ListAction).GetListRestrictions()), nil
	case "create":
		obj := action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		obj.Namespace = ns
		if _, ok := s.objects[ns+"/"+obj.Name]; ok {
			return true, nil, apierrors.NewAlreadyExists(leases, obj.Name)
		}
		obj.CreationTimestamp = metav1.Now()
		return true, s.store(client, obj), nil
	case "update":
		obj := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		obj.Namespace = ns
		cur, ok := s.objects[ns+"/"+obj.Name]
		if !ok {
			return true, nil, apierrors.NewNotFound(leases, obj.Name)
		}
		if obj.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(leases, obj.Name,
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %q, stored %q)",
					obj.ResourceVersion, cur.ResourceVersion))
		}
		return true, s.store(client, obj), nil
	case "delete":
		name := action.(k8stesting.DeleteAction).GetName()
		cur, ok := s.objects[ns+"/"+name]
		if !ok {
			return true, nil, apierrors.NewNotFound(leases, name)
		}
		delete(s.objects, ns+"/"+name)
		s.version++
		gone := cur.DeepCopy()
		gone.ResourceVersion = strconv.FormatInt(s.version, 10)
		s.notifyDeleted(gone)
		return true, nil, nil
	}
	return true, nil, apierrors.NewMethodNotSupported(leases, action.GetVerb())
}

// store saves obj with the next resourceVersion. s.mu is held.
func (s *Server) store(client string, obj *coordinationv1.Lease) *coordinationv1.Lease {
	s.version++
	obj.ResourceVersion = strconv.FormatInt(s.version, 10)
	_, existed := s.objects[obj.Namespace+"/"+obj.Name]
	s.objects[obj.Namespace+"/"+obj.Name] = obj
	holder := ""
	if obj.Spec.HolderIdentity != nil {
		holder = *obj.Spec.HolderIdentity
	}
	s.writes = append(s.writes, Write{Time: time.Now(), Namespace: obj.Namespace, Name: obj.Name,
		Holder: holder, Version: obj.ResourceVersion, Client: client})
	s.notify(obj, !existed)
	return obj.DeepCopy()
}

// Lease returns the Lease namespace/name, if it exists.
func (s *Server) Lease(namespace, name string) (*coordinationv1.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.objects[namespace+"/"+name]
	if !ok {
		return nil, false
	}
	return cur.DeepCopy(), true
}

// Holder returns the holder identity of the Lease namespace/name; empty
// when it does not exist or nobody holds it.
func (s *Server) Holder(namespace, name string) string {
	l, ok := s.Lease(namespace, name)
	if !ok || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Steal writes holder into the Lease namespace/name, renewed now for
// duration, as a replica that ignores the election would: the holder loses
// the lease without having released it.
func (s *Server) Steal(namespace, name, holder string, duration time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.objects[namespace+"/"+name]
	if !ok {
		return apierrors.NewNotFound(leases, name)
	}
	obj := cur.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(duration / time.Second)
	obj.Spec.HolderIdentity = &holder
	obj.Spec.LeaseDurationSeconds = &seconds
	obj.Spec.AcquireTime = &now
	obj.Spec.RenewTime = &now
	s.store("", obj)
	return nil
}

// History returns every successful write so far, in order.
func (s *Server) History() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.writes...)
}
