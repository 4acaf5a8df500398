// Package fleet runs controller-runtime reconcilers on every member cluster
// of a controllermanager fleet (cm.NewFleet), in the shape of
// sigs.k8s.io/multicluster-runtime: a Request carries the cluster's name
// (mcreconcile.Request), ControllerManagedBy(mgr).For(obj).Complete(r)
// registers a reconciler (mcbuilder), and mgr.GetCluster(ctx, name) gives the
// cluster's controller-runtime cluster.Cluster (mcmanager.Manager).
//
// For each member cluster the fleet engages, Manager.Build returns the
// children of that cluster's group: a store "cluster", a controller-runtime
// cluster.Cluster (cache, client, recorder, field indexer) built from the
// Cluster's guarded Config and started with the informers of every kind a
// reconciler watches (For, Owns, Watches; metadata only for
// WatchesMetadata), synced before the group's controllers run; then one
// controller per reconciler. A member going Offline stops its group, and so
// that cluster's informers and reconcilers only.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
)

// Request is a reconcile.Request with the name of the member cluster the
// object is in: multicluster-runtime's mcreconcile.Request.
type Request struct {
	ClusterName string
	reconcile.Request
}

// String is "cluster/namespace/name".
func (r Request) String() string { return r.ClusterName + "/" + r.Request.String() }

// Reconciler reconciles a Request.
type Reconciler = reconcile.TypedReconciler[Request]

// Func is a Reconciler made of a function.
type Func = reconcile.TypedFunc[Request]

// ErrClusterNotFound is returned by GetCluster for a cluster that is not
// engaged, or whose cache is not running (Offline, restarting).
var ErrClusterNotFound = errors.New("fleet: cluster not found")

// Options configure a Manager.
type Options struct {
	// Cluster configures each member's cluster.Cluster (Scheme, Cache,
	// Client, ...). Its zero value takes controller-runtime's defaults.
	Cluster []cluster.Option
}

// Manager holds the reconcilers registered with ControllerManagedBy and the
// member clusters the fleet engaged. Give its Build to cm.NewFleet; register
// reconcilers before the manager starts.
type Manager struct {
	opts Options

	mu          sync.Mutex
	controllers []*controllerSpec
	clusters    map[string]*member
}

// NewManager returns a Manager; pass its Build to cm.NewFleet.
func NewManager(opts Options) *Manager {
	return &Manager{opts: opts, clusters: map[string]*member{}}
}

// GetCluster returns the running cluster.Cluster of the member cluster
// name, or an error wrapping ErrClusterNotFound.
func (m *Manager) GetCluster(_ context.Context, name string) (cluster.Cluster, error) {
	m.mu.Lock()
	mb := m.clusters[name]
	m.mu.Unlock()
	if mb == nil {
		return nil, fmt.Errorf("%w: %q is not engaged", ErrClusterNotFound, name)
	}
	if cl := mb.get(); cl != nil {
		return cl, nil
	}
	return nil, fmt.Errorf("%w: %q has no running cache", ErrClusterNotFound, name)
}

// Build returns the children of member cluster c's group: the store
// "cluster" and one controller per registered reconciler.
func (m *Manager) Build(c cm.Cluster) []cm.Runnable {
	mb := &member{name: c.Name(), config: c.Config, opts: m.opts.Cluster, ready: make(chan struct{})}
	m.mu.Lock()
	m.clusters[c.Name()] = mb
	specs := append([]*controllerSpec(nil), m.controllers...)
	m.mu.Unlock()
	go func() {
		// Forget the member once it is disengaged, unless a newer
		// engagement of the same name has replaced it.
		<-c.Context().Done()
		m.mu.Lock()
		if m.clusters[c.Name()] == mb {
			delete(m.clusters, c.Name())
		}
		m.mu.Unlock()
	}()
	for _, s := range specs {
		mb.warm = append(mb.warm, s.kinds()...)
	}
	children := []cm.Runnable{cm.StoreChild(&clusterStore{m: mb})}
	for _, s := range specs {
		children = append(children, &controller{spec: s, m: mb})
	}
	return children
}

func (m *Manager) add(s *controllerSpec) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.clusters) > 0 {
		// A cluster's group is built once, when it is engaged: a later
		// reconciler would run on the clusters engaged after it only.
		return fmt.Errorf("fleet: reconciler %q registered after the fleet engaged a cluster: register every reconciler before the manager starts", s.name)
	}
	for _, o := range m.controllers {
		if o.name == s.name {
			return fmt.Errorf("fleet: a reconciler named %q is already registered", s.name)
		}
	}
	m.controllers = append(m.controllers, s)
	return nil
}

// member is one engaged member cluster: its cluster.Cluster while the
// store "cluster" runs.
type member struct {
	name   string
	config func() *rest.Config
	opts   []cluster.Option
	warm   []watchSpec

	mu sync.Mutex
	cl cluster.Cluster
	// ready is closed while cl is set, and replaced when cl is cleared;
	// gone is closed when the cl it came with is cleared (its store shut
	// down): a controller built on that cache must be built again.
	ready chan struct{}
	gone  chan struct{}
}

func (mb *member) get() cluster.Cluster {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.cl
}

// set records the running cluster (nil: none) and tells those waiting for
// one, and those built on the one it replaces.
func (mb *member) set(cl cluster.Cluster) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.cl != nil {
		close(mb.gone)
		mb.ready = make(chan struct{})
	}
	mb.cl = cl
	if cl != nil {
		mb.gone = make(chan struct{})
		close(mb.ready)
	}
}

// wait returns the running cluster, and a channel closed once it stops,
// waiting for the store "cluster" to run one until ctx ends.
func (mb *member) wait(ctx context.Context) (cluster.Cluster, <-chan struct{}, error) {
	for {
		mb.mu.Lock()
		cl, gone, ready := mb.cl, mb.gone, mb.ready
		mb.mu.Unlock()
		if cl != nil {
			return cl, gone, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, nil, context.Cause(ctx)
		}
	}
}
