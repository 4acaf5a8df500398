package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// A fleet: one supervised subtree per member cluster, engaged and
// disengaged at run time by a ClusterProvider, probed, and stopped while
// its API server does not answer. It is built on groups and on the
// lifecycle calls users have (AddChild with a Parent, StopChild,
// StartChild, RemoveChild): the supervisor knows nothing of fleets.
//
//	<fleet>                 a group (OneForOne)
//	├── <fleet>/provider    the fleet's runner: a controller that runs the
//	│                       ClusterProvider and one loop per member cluster
//	├── <fleet>/<cluster-a> a group: build(cluster-a)'s children
//	└── <fleet>/<cluster-b>
//
// docs/fleet.md sets out the semantics.

// Fleet events, as Event.Type carries them; Event.Child is the cluster's
// subtree, "<fleet>/<cluster>", and Event.Kind is "cluster", as it is in
// the supervision events of the cluster's group (its ChildStopped,
// ChildFailed, ChildRestarted) and in Status. They are
// documented at supervisor.ClusterEngaged and the names after it.
const (
	// ClusterEngaged: the fleet took on a member cluster, or its changed
	// config.
	ClusterEngaged = supervisor.ClusterEngaged
	// ClusterOffline: a member cluster's subtree is not running (its API
	// server failed its probes, or it could not be engaged); Err says why.
	ClusterOffline = supervisor.ClusterOffline
	// ClusterOnline: a member cluster answers its probes and its subtree
	// runs.
	ClusterOnline = supervisor.ClusterOnline
	// ClusterDisengaged: a member cluster was let go and its subtree
	// removed, or it left Event.Child (its fleet removed, or moved).
	ClusterDisengaged = supervisor.ClusterDisengaged
)

// KindCluster is Event.Kind of the fleet's events.
const KindCluster = "cluster"

// FleetProviderChild is the name of a fleet's runner among its children:
// the child "<fleet>/provider" runs the ClusterProvider. No member cluster
// may take this name.
const FleetProviderChild = "provider"

// Errors of a fleet, matched with errors.Is.
var (
	// ErrInvalidClusterName: a provider engaged a cluster whose name is not
	// a valid path segment (empty, "." or "..", containing "/", white space
	// or a control character, longer than 253 bytes) or is
	// FleetProviderChild.
	ErrInvalidClusterName = errors.New("controllermanager: invalid cluster name")
	// ErrDuplicateCluster: two sources of a provider name the same member
	// cluster (KubeconfigSecrets: two Secrets for one cluster).
	ErrDuplicateCluster = errors.New("controllermanager: duplicate cluster")
	// ErrClusterDisengaged is wrapped by the error a Cluster's Config
	// refuses writes with once its Context has ended: the cluster was
	// disengaged, its config replaced, or the manager stopped. It is
	// wrapped too by the error of a StartChild or RestartChild of a member
	// cluster's group built for a config replaced since, or for a cluster
	// disengaged, or of anything in it: the fleet removes that group.
	ErrClusterDisengaged = errors.New("controllermanager: cluster disengaged")
	// ErrFleetInUse is wrapped by the error of an Add, AddChild or Start
	// that brings a Fleet added to another manager already: a Fleet runs
	// in one manager, whose runner and members it shares with no other.
	// It is also wrapped when the Fleet is in this manager's tree already
	// (at another path, or twice in one add): a Fleet runs once.
	ErrFleetInUse = errors.New("controllermanager: fleet added to another manager")
	// ErrClusterOffline is wrapped by the error of a StartChild or
	// RestartChild (sent in any way) of an Offline member cluster's group,
	// or of anything in it: its API server does not answer, so its stores
	// could not recover. The fleet starts the group itself once the cluster
	// answers its probes for SuccessThreshold. A StartChild or RestartChild
	// of a group above leaves the member's group as it is.
	ErrClusterOffline = supervisor.ErrClusterOffline
)

// FleetSpec configures a fleet; its zero value works, each zero field
// taking the default its doc states.
type FleetSpec struct {
	// Supervision is each member cluster's group's (NewGroup), its zero
	// fields inherited from the manager's; OnExhausted defaults to
	// ExhaustedStop, so that a crash-looping cluster's subtree stops alone.
	// Its ShutdownTimeout bounds the Shutdown calls of the member's
	// restarts and of the stops of its children, and its HealthInterval,
	// HealthTimeout and UnhealthyThreshold are how the member's
	// controllers are probed (see NewGroup). It is validated as
	// NewGroup's is, at Start.
	Supervision SupervisionSpec `json:"supervision,omitempty"`
	// ProbePeriod is how often each member's API server is probed (GET
	// /readyz). Default 10s.
	ProbePeriod metav1.Duration `json:"probePeriod,omitempty"`
	// ProbeTimeout bounds one probe. Default 5s, or ProbePeriod if shorter;
	// it may not exceed ProbePeriod, and is at least 50ms. It is measured
	// on the real clock (it bounds real I/O), the period and thresholds on
	// the manager's (WithClock).
	ProbeTimeout metav1.Duration `json:"probeTimeout,omitempty"`
	// FailureThreshold: an Online member whose probes fail for this long
	// goes Offline, its subtree stopped. Default 30s (Karmada's
	// cluster-failure-threshold).
	FailureThreshold metav1.Duration `json:"failureThreshold,omitempty"`
	// SuccessThreshold: an Offline member whose probes succeed for this long
	// goes Online again, its subtree started. Default 30s (Karmada's
	// cluster-success-threshold).
	SuccessThreshold metav1.Duration `json:"successThreshold,omitempty"`
}

// The FleetSpec defaults (internal/defaults, listed in docs/defaults.md).
const (
	DefaultFleetProbePeriod      = defaults.FleetProbePeriod
	DefaultFleetProbeTimeout     = defaults.FleetProbeTimeout
	DefaultFleetFailureThreshold = defaults.FleetFailureThreshold
	DefaultFleetSuccessThreshold = defaults.FleetSuccessThreshold
)

// minFleetProbeTimeout is the least ProbeTimeout a FleetSpec may set.
const minFleetProbeTimeout = 50 * time.Millisecond

// withDefaults fills spec's zero fields and validates it; every problem is
// reported at once.
func (spec FleetSpec) withDefaults() (FleetSpec, error) {
	var errs []error
	for _, d := range []struct {
		name string
		v    *metav1.Duration
		def  time.Duration
	}{
		{"probePeriod", &spec.ProbePeriod, DefaultFleetProbePeriod},
		{"failureThreshold", &spec.FailureThreshold, DefaultFleetFailureThreshold},
		{"successThreshold", &spec.SuccessThreshold, DefaultFleetSuccessThreshold},
	} {
		switch {
		case d.v.Duration < 0:
			errs = append(errs, fmt.Errorf("fleet: %s must not be negative (%s)", d.name, d.v.Duration))
		case d.v.Duration == 0:
			d.v.Duration = d.def
		}
	}
	switch {
	case spec.ProbeTimeout.Duration < 0:
		errs = append(errs, fmt.Errorf("fleet: probeTimeout must not be negative (%s)", spec.ProbeTimeout.Duration))
	case spec.ProbeTimeout.Duration == 0:
		spec.ProbeTimeout.Duration = min(DefaultFleetProbeTimeout, spec.ProbePeriod.Duration)
	case spec.ProbeTimeout.Duration > spec.ProbePeriod.Duration:
		errs = append(errs, fmt.Errorf("fleet: probeTimeout (%s) must not exceed probePeriod (%s)", spec.ProbeTimeout.Duration, spec.ProbePeriod.Duration))
	}
	if spec.ProbeTimeout.Duration > 0 && spec.ProbeTimeout.Duration < minFleetProbeTimeout {
		// Shorter than an API server's round trip: every probe fails and
		// every member stays Offline.
		errs = append(errs, fmt.Errorf("fleet: probeTimeout (%s; defaults to probePeriod when that is shorter than 5s) must be at least %s", spec.ProbeTimeout.Duration, minFleetProbeTimeout))
	}
	if spec.Supervision.OnExhausted == "" {
		spec.Supervision.OnExhausted = ExhaustedStop
	}
	// Each member's group is NewGroup(…, spec.Supervision, …): refuse here,
	// at Start, what every member's AddChild would refuse later.
	if err := (&Group{name: "member", spec: spec.Supervision}).decl("", "member").Err; err != nil {
		errs = append(errs, errors.Unwrap(err))
	}
	return spec, errors.Join(errs...)
}

// Cluster is what build gets for one member cluster.
type Cluster interface {
	// Name is the cluster's name as its provider gave it; its subtree is
	// "<fleet>/<name>".
	Name() string
	// Config is a copy of the cluster's config whose requests that act on
	// the cluster (see GuardTransport) pass the manager's lease guard
	// first: with election on, the single lease (ShardLeaseGuard(0)), or
	// under sharded leadership the cluster's shard's
	// (ShardLeaseGuard(ShardOf(Name(), Shards))); with election off, nil
	// until the manager stops. Once Context has ended
	// they fail with ErrClusterDisengaged.
	Config() *rest.Config
	// Client is a clientset built from Config, made on the first call.
	Client() kubernetes.Interface
	// Context ends when the cluster is disengaged, its config is replaced,
	// or the manager shuts down. Under sharded leadership it does not end
	// when this replica loses the cluster's shard but keeps another: the
	// subtree's controllers are stopped, and Config's writes refused,
	// instead.
	Context() context.Context
}

// ClusterProvider engages and disengages member clusters while the fleet
// runs (the shape of multicluster-runtime's Provider and Aware.Engage): it
// calls engage for a cluster that appears or whose config changed, and
// disengage for one that goes; Run returns when ctx ends.
//
// engage and disengage return at once: the fleet probes and starts the
// cluster on a goroutine of that cluster's, so a slow or unreachable
// cluster holds nothing up. engage returns an error only for input it
// refuses (a name that is not a valid path segment, ErrInvalidClusterName;
// a nil config); an engage with a config equal to the one engaged does
// nothing. Both may be called from any goroutine until Run's ctx ends;
// after that engage returns an error and disengage does nothing: a
// goroutine that outlives its Run never engages into the fleet's next
// Run (the fleet restarted, or removed and added again).
//
// A Run that returns an error or panics before ctx ends is a failure of
// the child "<fleet>/provider", supervised like any other: it is restarted
// with backoff, and Run is called again. The clusters it engaged stay
// engaged across the restart, probed on; a restarted Run is expected to
// engage the clusters it knows again (an equal config is a no-op), and a
// cluster it no longer knows stays until disengaged.
type ClusterProvider interface {
	Run(ctx context.Context, engage func(name string, cfg *rest.Config) error, disengage func(name string)) error
}

// ClusterState is where a member cluster stands, in ClusterStatus.
type ClusterState string

// The member cluster states.
const (
	// ClusterStateEngaging: engaged, its first probe not answered yet.
	ClusterStateEngaging ClusterState = "Engaging"
	// ClusterStateOnline: its API server answers; its subtree runs.
	ClusterStateOnline ClusterState = "Online"
	// ClusterStateOffline: its API server did not answer (for
	// FailureThreshold, or when engaged); its subtree is stopped or not yet
	// added. It is probed on.
	ClusterStateOffline ClusterState = "Offline"
	// ClusterStateFailed: it could not be engaged (its config does not
	// make a client, build panicked or returned nothing), or its group
	// failed and stopped on its own (OnExhausted Stop: a spent restart
	// budget, a hung Shutdown contained); Err says why. It stays so until
	// its provider engages it with another config; one whose group stopped
	// on its own also until a StartChild of its group, or an outage and
	// its end, runs it again.
	ClusterStateFailed ClusterState = "Failed"
)

// ClusterStatus is one member cluster's state, as Fleet.Clusters reports
// it.
type ClusterStatus struct {
	Name      string       // the cluster's name
	Path      string       // its subtree's path, "<fleet>/<name>": Status.Child finds it once added
	State     ClusterState // where it stands
	Since     time.Time    // when it entered State (the manager's clock)
	LastProbe time.Time    // when it was last probed; zero before
	ProbeErr  error        // the last probe's failure; nil when it answered
	Err       error        // why it is Offline or Failed; nil otherwise
	// Problem is the last problem its provider reported engaging it
	// (ReportClusterProblem: a kubeconfig that does not parse), until it
	// is engaged again; the cluster stays on its config meanwhile.
	Problem error
}

// Fleet is a child like a Group (NewFleet): a group "<name>" holding the
// fleet's runner and one group per engaged member cluster. Add it to a
// ControllerManager with Add, AddChild, or inside a group.
type Fleet struct {
	name     string
	provider ClusterProvider
	build    func(Cluster) []Runnable
	spec     FleetSpec
	err      error // NewFleet's validation; the runner's Run returns it
	group    *Group
	sharded  *Group // group's twin under sharded leadership: the runner as a store (fleetStore)

	mu      sync.Mutex
	host    *BaseManager // the manager it was added to
	path    string       // the fleet's group's path in the manager's tree
	members map[string]*member
	// leaving: members that have left members and are publishing their
	// ClusterDisengaged (their events held); an engage of the name waits
	// for it, so that its ClusterEngaged comes after.
	leaving map[string]*member
	// lingering: member paths whose group's removal overran its bound
	// (removeGroup) and may still be in the tree, Stopping: nothing is
	// built there until it has gone (addGroup). Guarded by mu.
	lingering map[string]bool
	inc       *fleetIncarnation // the runner's running incarnation, or nil
	last      *fleetIncarnation // the latest incarnation, running or shut down
	phase     chan struct{}     // closed and replaced at every PhaseChanged
	recheck   bool              // events were dropped: a loop reads the tree (recheckStopped)
	events    uint64            // events that told a member whether its group stopped itself (noted)
	// placed: the fleet's group is in host's tree, as the supervisor
	// told it in its mailbox (fleetPlacement): from the add's acceptance
	// (TreeAdding) until it leaves (TreeRemoved), or until the add is
	// refused after all (TreeRefused). A second add of it is refused with
	// ErrFleetInUse: a fleet runs once. unplacedPath is path before the add
	// being accepted, which a TreeRefused puts back.
	placed       bool
	unplacedPath string
}

// NewFleet returns a child like a Group (name: no "/", unique among its
// siblings): one group "<name>/<cluster>" per member cluster that provider
// engages, whose children build returns for that cluster, supervised by
// spec.Supervision (stores first, as in any group). A cluster's API server
// is probed every spec.ProbePeriod: once it has failed for
// FailureThreshold its group is stopped (StopChild), and once it has
// answered for SuccessThreshold it is started again (StartChild). A
// cluster that does not answer when engaged starts Offline; no member
// cluster ever holds up the manager's Start, its probes or its shutdown.
// The fleet's events, its Clusters and the metric
// controllermanager_cluster_ready{fleet, cluster} say where each cluster
// stands.
//
// Like NewGroup it cannot fail: an invalid spec, a nil provider or build
// makes Start (or AddChild) fail naming "<name>/provider".
//
// Under sharded leadership (LeaderElectionSpec.Shards = S > 1) a cluster
// belongs to shard ShardOf(its name, S): its subtree's controllers run only
// on the replica that holds that shard's Lease and stop when it is lost,
// and its Config's writes pass ShardLeaseGuard(that shard). The runner
// ("<name>/provider") is then a store: it runs, and adds every member's
// subtree, on every replica that holds at least one shard (docs/fleet.md).
func NewFleet(name string, provider ClusterProvider, build func(Cluster) []Runnable, spec FleetSpec) *Fleet {
	spec, err := spec.withDefaults()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if provider == nil {
		errs = append(errs, errors.New("fleet: provider is nil"))
	} else if p, ok := provider.(*secretClusters); ok && p.client == nil {
		errs = append(errs, errors.New("fleet: provider: KubeconfigSecrets: nil client"))
	}
	if build == nil {
		errs = append(errs, errors.New("fleet: build is nil"))
	}
	f := &Fleet{name: name, provider: provider, build: build, spec: spec, members: map[string]*member{}, leaving: map[string]*member{}, lingering: map[string]bool{}, phase: make(chan struct{})}
	if err := errors.Join(errs...); err != nil {
		f.err = fmt.Errorf("fleet %q: %w", name, err)
	}
	// A member's failures stay in its group; the fleet's own level restarts
	// only the child that failed, whatever the manager's strategy, so that
	// a provider's failure never restarts the clusters' subtrees.
	r := &fleetRunner{f: f}
	f.group = NewGroup(name, SupervisionSpec{Strategy: OneForOne}, r)
	f.sharded = NewGroup(name, SupervisionSpec{Strategy: OneForOne}, fleetStore{r: r})
	f.group.hook, f.sharded.hook = fleetPlacement{f}, fleetPlacement{f}
	return f
}

// Name is the fleet's name.
func (f *Fleet) Name() string { return f.name }

// Shutdown does nothing: the manager shuts a fleet's children down itself.
func (f *Fleet) Shutdown(context.Context) {}

// Clusters returns the state of every engaged member cluster, by name.
func (f *Fleet) Clusters() []ClusterStatus {
	f.mu.Lock()
	out := make([]ClusterStatus, 0, len(f.members))
	for _, mb := range f.members {
		out = append(out, mb.status)
	}
	f.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Cluster returns the state of the named member cluster.
func (f *Fleet) Cluster(name string) (ClusterStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mb, ok := f.members[name]; ok {
		return mb.status, true
	}
	return ClusterStatus{}, false
}

// fleetGroup is v's group when v is a Fleet, else v: a fleet goes
// wherever a group goes. Where it sits in the tree is the supervisor's to
// say (fleetPlacement), once it accepts the add.
func fleetGroup(v any) any {
	f, ok := v.(*Fleet)
	if !ok || f == nil {
		return v
	}
	f.mu.Lock()
	g := f.group
	if f.host != nil && f.host.shardCount() > 1 {
		g = f.sharded
	}
	f.mu.Unlock()
	return g
}

// inTree is the supervisor telling the fleet, in its mailbox, what became
// of its runner at path ("<fleet>/provider"): it never blocks. A removal
// disengages its members (removedFromTree); the manager's stop ends their
// clusters (managerStopped). Whether the fleet is in the tree is its
// group's word (fleetPlacement): the runner removed alone leaves it there.
func (f *Fleet) inTree(ev supervise.TreeEvent, path string) error {
	switch ev {
	case supervise.TreeRemoved:
		f.removedFromTree()
	case supervise.TreeManagerStopped:
		f.managerStopped()
	}
	return nil
}

// fleetPlacement is the TreeHook of the fleet's group: the fleet is in the
// tree while its group is. An add accepted places the fleet at the group's
// path, refused unless the fleet is in the tree already (ErrFleetInUse: it
// runs once); a refused one puts it back where it was; the group's removal
// lets it be added again. The runner removed alone (RemoveChild of
// "<fleet>/provider") leaves the group, and its members' groups until the
// removal takes them: the fleet is still in the tree, and an add of it
// elsewhere would run its members' subtrees at both paths. It never
// blocks.
type fleetPlacement struct{ f *Fleet }

func (h fleetPlacement) InTree(ev supervise.TreeEvent, path string) error {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev {
	case supervise.TreeAdding:
		if f.placed {
			return fmt.Errorf("fleet %q: in this manager's tree already, at %q: %w", f.name, f.pathLocked(), ErrFleetInUse)
		}
		f.placed, f.unplacedPath = true, f.path
		f.path = path
	case supervise.TreeRefused:
		f.placed, f.path = false, f.unplacedPath
	case supervise.TreeRemoved:
		f.placed = false // it may be added again
	}
	return nil
}

// bindFleets tells every fleet among vals, at any depth of their groups,
// the manager it was added to. A fleet bound to another manager already is
// refused (ErrFleetInUse), and none of vals' fleets is bound: that manager's
// runner and members are left alone. So is a fleet twice among vals. A
// fleet in this manager's tree already is refused by the supervisor, as it
// accepts the add (fleetPlacement).
func (m *BaseManager) bindFleets(vals []any) error {
	var fleets []*Fleet
	collectFleets(vals, &fleets)
	for i, x := range fleets {
		if slices.Contains(fleets[:i], x) {
			return fmt.Errorf("fleet %q: added twice in one add: %w", x.name, ErrFleetInUse)
		}
	}
	var bound []*Fleet
	for _, x := range fleets {
		x.mu.Lock()
		switch {
		case x.host == nil:
			x.host = m
			bound = append(bound, x)
		case x.host != m:
			x.mu.Unlock()
			for _, b := range bound { // as it was: nothing of this add binds
				b.mu.Lock()
				b.host = nil
				b.mu.Unlock()
			}
			return fmt.Errorf("fleet %q: %w", x.name, ErrFleetInUse)
		}
		x.mu.Unlock()
	}
	m.mu.Lock()
	for _, x := range fleets {
		if !slices.Contains(m.fleets, x) {
			m.fleets = append(m.fleets, x)
		}
	}
	m.mu.Unlock()
	return nil
}

// collectFleets appends to out every fleet among vals, at any depth of
// their groups.
func collectFleets(vals []any, out *[]*Fleet) {
	for _, v := range vals {
		switch x := v.(type) {
		case *Fleet:
			if x != nil {
				*out = append(*out, x)
			}
		case *Group:
			if x == nil {
				continue
			}
			children := make([]any, len(x.children))
			for i, c := range x.children {
				children[i] = c
			}
			collectFleets(children, out)
		}
	}
}

// fleetStatus marks, in st, every member cluster's group of the manager's
// fleets (Kind "cluster" already, as its record says) with where the
// cluster stands (ClusterInfo): the shard that runs it and that shard's
// holder.
func (m *BaseManager) fleetStatus(st *Status) {
	m.mu.Lock()
	fleets := slices.Clone(m.fleets)
	m.mu.Unlock()
	shards := m.shardCount()
	for _, f := range fleets {
		f.mu.Lock()
		path := f.pathLocked()
		f.mu.Unlock()
		g := findChildPtr(st.Children, path)
		if g == nil {
			continue // not started, or removed
		}
		// The members' groups are the fleet group's children: one index, so
		// that Status stays linear in the members.
		byPath := make(map[string]*supervisor.ChildStatus, len(g.Children))
		for i := range g.Children {
			byPath[g.Children[i].Name] = &g.Children[i]
		}
		for _, cs := range f.Clusters() {
			c := byPath[cs.Path]
			if c == nil {
				continue // not added (yet), or removed
			}
			info := &supervisor.ClusterInfo{State: string(cs.State), Since: cs.Since, LastProbe: cs.LastProbe,
				ProbeError: errText(cs.ProbeErr), Error: errText(cs.Err), Problem: errText(cs.Problem), Shard: -1,
				Holder: st.LeaderIdentity}
			if shards > 1 {
				info.Shard = ShardOf(cs.Name, shards)
				info.Holder = ""
				if info.Shard < len(st.Shards) {
					info.Holder = st.Shards[info.Shard].Holder
				}
			}
			c.Cluster = info
		}
	}
}

// findChildPtr is the entry at path in children, at any depth, or nil.
func findChildPtr(children []supervisor.ChildStatus, path string) *supervisor.ChildStatus {
	for i := range children {
		c := &children[i]
		if c.Name == path {
			return c
		}
		if c.Kind.IsGroup() && strings.HasPrefix(path, c.Name+"/") {
			return findChildPtr(c.Children, path)
		}
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// validClusterName says why name cannot be a member cluster's name, a path
// segment of the tree, or nil.
func validClusterName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidClusterName)
	case name == "." || name == "..":
		return fmt.Errorf("%w: %q", ErrInvalidClusterName, name)
	case name == FleetProviderChild:
		return fmt.Errorf("%w: %q is the fleet's runner's name", ErrInvalidClusterName, name)
	case len(name) > 253:
		return fmt.Errorf("%w: %q is longer than 253 bytes", ErrInvalidClusterName, name[:32]+"…")
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: %q: \"/\" is not allowed in a name", ErrInvalidClusterName, name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q: white space and control characters are not allowed", ErrInvalidClusterName, name)
		}
	}
	return nil
}

// runProvider runs the provider, a panic turned into an error with its
// stack.
func runProvider(ctx context.Context, p ClusterProvider, engage func(string, *rest.Config) error, disengage func(string)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return p.Run(ctx, engage, disengage)
}
