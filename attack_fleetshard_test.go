package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// fsNames returns, for shards = 2, a cluster name on shard 0 and one on
// shard 1.
func fsNames(shards int) (on0, on1 string) {
	for i := 0; on0 == "" || on1 == ""; i++ {
		n := fmt.Sprintf("m-%d", i)
		switch cm.ShardOf(n, shards) {
		case 0:
			if on0 == "" {
				on0 = n
			}
		case 1:
			if on1 == "" {
				on1 = n
			}
		}
	}
	return on0, on1
}

// fsChild is the ChildStatus at path, or the zero value.
func fsChild(t *testing.T, m *cm.ControllerManager, path string) supervisor.ChildStatus {
	t.Helper()
	st := mustStatus(t, m)
	c, _ := st.Child(path)
	return c
}

// A fleet inside a group of AddShardedGroup (shard 1) under sharded
// leadership: each member's group is pinned to its own cluster's shard, not
// the enclosing group's. Stealing the Lease of the member's shard stops its
// controller (and its writes are refused), the member of the other shard
// runs on, its Cluster.Context() stays open, and when the shard comes back
// the controller runs again on the same Cluster with Restarts = runs-1.
func TestAttackFleetInShardedGroupFollowsMemberShard(t *testing.T) {
	t.Parallel()
	fs := newFSSetup(t)
	m, srv, bl, log, on0, on1 := fs.m, fs.srv, fs.bl, fs.log, fs.on0, fs.on1
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	running := func(c string) bool {
		b := bl.of(c)
		return len(b) == 1 && b[0].runs.Load() > b[0].stops.Load()
	}
	elEventually(t, "both members run", func() bool { return running(on0) && running(on1) })

	st := mustStatus(t, m)
	for _, sh := range st.Shards {
		t.Logf("shard %d: %v", sh.Index, sh.Children)
	}
	require.Contains(t, st.Shards[0].Children, "g-1/fleet/"+on0+"/ctrl")
	require.Contains(t, st.Shards[1].Children, "g-1/fleet/"+on1+"/ctrl")
	c0 := bl.of(on0)[0]
	require.NoError(t, fsWrite(c0.cluster))

	// Shard 0 is stolen: on0's controller stops, on1's runs on.
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-0", "thief", elLeaseDuration))
	elEventually(t, "on0 stopped", func() bool { return !running(on0) })
	require.Error(t, fsWrite(c0.cluster), "a write of a cluster whose shard is not held")
	// on1 runs on, its writes passing, unless the machine took shard 1
	// meanwhile: at load (a race build beside busy loops, load 9 to 12) a
	// renewal may go unanswered for the renew deadline, and the elector
	// gives the shard up ("not renewed for"), as it must; with shard 0
	// gone too the replica stands down. Seen in loaded runs: on1 stopped,
	// or running still but its write refused (the guard fails with the
	// term, before the controller is stopped). Shard 1 comes back, and on1
	// with it. Any other stop of on1 means the steal of shard 0 reached it.
	on1OK := func() error {
		if !running(on1) {
			return fmt.Errorf("%s (shard 1) stopped while shard 0 is stolen", on1)
		}
		return fsWrite(bl.of(on1)[0].cluster)
	}
	if err := on1OK(); err != nil {
		// The guard fails before ShardLost reaches a subscriber: wait for
		// it, then log every event either way.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		lost, ok := fsShardLost(log.all(), 1)
		deadline := time.After(elWait)
		for waiting := true; !ok && waiting; {
			select {
			case <-tick.C:
				lost, ok = fsShardLost(log.all(), 1)
			case <-deadline:
				waiting = false
			}
		}
		for _, e := range log.all() {
			t.Logf("event %v (shard %d)", e, e.Shard)
		}
		require.True(t, ok, "%v, and shard 1 not lost: the steal of shard 0 reached it", err)
		require.True(t, lostToTheMachineErr(lost.Err), "%v: shard 1 lost, but not to the machine: %v", err, lost.Err)
		t.Logf("excused (%v): shard 1 was lost to the machine: %v", err, lost.Err)
		pollUntil(t, 3*elWait, func() string {
			if err := on1OK(); err != nil {
				return fmt.Sprintf("%s runs again, writing, once shard 1 is back: %v", on1, err)
			}
			return ""
		})
	}
	require.NoError(t, c0.cluster.Context().Err(), "the cluster's context outlasts the loss of its shard")

	// The thief's Lease expires: a takes shard 0 again and on0 runs again
	// on the same Cluster.
	elEventuallyWithin(t, 3*elWait, "on0 runs again", func() bool { return running(on0) })
	require.Len(t, bl.of(on0), 1, "not built again")
	require.NoError(t, c0.cluster.Context().Err())
	require.NoError(t, fsWrite(c0.cluster))
	cs := fsChild(t, m, "g-1/fleet/"+on0+"/ctrl")
	require.Equal(t, int(c0.runs.Load())-1, cs.Restarts, "Restarts = runs-1")
	for _, c := range []string{on0, on1} {
		fsOrder(t, log.all(), "g-1/fleet/"+c)
	}
}

// fsShardLost is the first ShardLost of shard among events.
func fsShardLost(events []cm.Event, shard int) (cm.Event, bool) {
	for _, e := range events {
		if e.Type == cm.ShardLost && e.Shard == shard {
			return e, true
		}
	}
	return cm.Event{}, false
}

// fsWrite creates a ConfigMap through c's Client: nil when its guard let
// it pass.
func fsWrite(c cm.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	_, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	return err
}

// fsOrder checks the order of child's cluster events: ClusterEngaged
// first, ClusterOnline/Offline after it, ClusterDisengaged last.
func fsOrder(t *testing.T, events []cm.Event, child string) {
	t.Helper()
	var seq []cm.EventType
	for _, e := range events {
		if e.Child != child {
			continue
		}
		switch e.Type {
		case cm.ClusterEngaged, cm.ClusterOnline, cm.ClusterOffline, cm.ClusterDisengaged:
			if e.Type == cm.ClusterEngaged && e.Err != nil {
				continue // a problem report
			}
			seq = append(seq, e.Type)
		}
	}
	engaged := false
	for i, ty := range seq {
		switch ty {
		case cm.ClusterEngaged:
			engaged = true
		case cm.ClusterOnline, cm.ClusterOffline:
			require.True(t, engaged, "%s: %v before ClusterEngaged: %v", child, ty, seq)
		case cm.ClusterDisengaged:
			require.True(t, engaged, "%s: disengaged before engaged: %v", child, seq)
			engaged = false
			if i+1 < len(seq) {
				require.Equal(t, cm.ClusterEngaged, seq[i+1], "%s: after ClusterDisengaged: %v", child, seq)
			}
		}
	}
}

// fsSetup is a one-replica manager, shards = 2, with a fleet of members
// on0 (shard 0) and on1 (shard 1) inside group "g-1" of AddShardedGroup.
type fsSetup struct {
	m        *cm.ControllerManager
	srv      *leasetest.Server
	log      *eventLog
	bl       *builds
	prov     *handProvider
	fleet    *cm.Fleet
	on0, on1 string
	cfgs     map[string]*rest.Config
}

func newFSSetup(t *testing.T) *fsSetup {
	t.Helper()
	return startFSSetup(t, cm.LeaseLostReelect, nil)
}

// startFSSetup makes and starts an fsSetup whose manager does onLost and
// whose fleet's provider is mkProv's (nil: a handProvider) for the
// members' configs. The test's cleanup shuts it down.
func startFSSetup(t *testing.T, onLost cm.LeaseLostAction, mkProv func(cfgs map[string]*rest.Config) cm.ClusterProvider) *fsSetup {
	t.Helper()
	const shards = 2
	s := &fsSetup{srv: leasetest.NewServer(), bl: newBuilds()}
	s.on0, s.on1 = fsNames(shards)
	s.cfgs = map[string]*rest.Config{s.on0: newFakeMember(t, memberOK).config(), s.on1: newFakeMember(t, memberOK).config()}
	var prov cm.ClusterProvider
	if mkProv != nil {
		prov = mkProv(s.cfgs)
	} else {
		s.prov = newHandProvider(s.cfgs)
		prov = s.prov
	}
	spec := elSpec(onLost)
	spec.Shards = shards
	m, err := cm.NewControllerManager(cm.NewContext(s.srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	s.m = m
	s.fleet = cm.NewFleet("fleet", prov, s.bl.build, fleetSpec())
	m.AddShardedGroup("g", cm.SupervisionSpec{}, func(sh cm.Shard) []cm.Runnable {
		if sh.Index == 1 {
			return []cm.Runnable{s.fleet}
		}
		return []cm.Runnable{&clusterCtrl{}}
	})
	s.log = subscribe(t, m)
	t.Cleanup(s.shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	return s
}

// shutdown shuts the manager down, waiting elWait at most.
func (s *fsSetup) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	s.m.ShutdownAndWait(ctx)
}

// running: the latest build of c has a controller running.
func (s *fsSetup) running(c string) bool {
	b := s.bl.of(c)
	return len(b) > 0 && b[len(b)-1].runs.Load() > b[len(b)-1].stops.Load()
}

// anyRunning: some build of c has a controller running.
func (s *fsSetup) anyRunning(c string) bool {
	for _, x := range s.bl.of(c) {
		if x.runs.Load() > x.stops.Load() {
			return true
		}
	}
	return false
}

// settledOK: every member's controller runs iff this replica holds its
// shard, is Online, and no older build's controller runs.
func (s *fsSetup) settledOK(t *testing.T, prefix string) string {
	for _, c := range []string{s.on0, s.on1} {
		held := s.m.ShardLeaseGuard(cm.ShardOf(c, 2)) == nil
		b := s.bl.of(c)
		for i, x := range b {
			if i < len(b)-1 && x.runs.Load() > x.stops.Load() {
				return fmt.Sprintf("%s: an old build (%d of %d) still runs", c, i+1, len(b))
			}
		}
		if s.running(c) != held {
			st := mustStatus(t, s.m)
			g, _ := st.Child(prefix + "/" + c)
			x, _ := st.Child(prefix + "/" + c + "/ctrl")
			cs, _ := s.fleet.Cluster(c)
			pr, _ := st.Child(prefix + "/provider")
			var runs []string
			for _, y := range b {
				runs = append(runs, fmt.Sprintf("%d/%d", y.runs.Load(), y.stops.Load()))
			}
			return fmt.Sprintf("%s: running %v, shard held %v; group %s %v; ctrl %s err %v; provider %s; cluster %s %v; builds runs/stops %v", c, s.running(c), held,
				g.State, g.Group, x.State, x.LastError, pr.State, cs.State, cs.Err, runs)
		}
		cs, ok := s.fleet.Cluster(c)
		if !ok || cs.State != cm.ClusterStateOnline {
			return fmt.Sprintf("%s: %+v", c, cs)
		}
		if held {
			if err := fsWrite(b[len(b)-1].cluster); err != nil {
				return fmt.Sprintf("%s: write refused while its shard is held: %v", c, err)
			}
		}
		if _, ok := mustStatus(t, s.m).Child(prefix + "/" + c); !ok {
			return fmt.Sprintf("%s: no group %s", c, prefix+"/"+c)
		}
	}
	return ""
}

// The enclosing group's shard (1) stolen, then the fleet's group stopped,
// restarted and started while a shard is away, then removed and added
// again under another group: after each step the members settle where
// their shards are, events stay in order, every call returns.
func TestAttackFleetInShardedGroupLifecycle(t *testing.T) {
	t.Parallel()
	s := newFSSetup(t)
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, s.m, 0) && holdsShard(t, s.m, 1) })
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	c1 := s.bl.of(s.on1)[0].cluster

	// The shard of the enclosing group is stolen: on1 stops, on0 runs on.
	require.NoError(t, s.srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
	pollUntil(t, elWait, func() string {
		if s.anyRunning(s.on1) {
			return "on1 runs"
		}
		return ""
	})
	require.Error(t, fsWrite(c1))
	require.True(t, s.running(s.on0))
	require.NoError(t, fsWrite(s.bl.of(s.on0)[0].cluster))

	call := func(what string, f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		err := f(ctx)
		require.NoError(t, ctx.Err(), "%s returned only past its context", what)
		t.Logf("%s: %v", what, err)
		return err
	}
	// While shard 1 is away: RestartChild of g-1, then StopChild and
	// StartChild of it.
	_ = call("RestartChild g-1", func(ctx context.Context) error { return s.m.RestartChild(ctx, "g-1") })
	pollUntil(t, elWait, func() string {
		if s.anyRunning(s.on1) {
			return "on1 runs without its shard"
		}
		if !s.running(s.on0) {
			return "on0 not running"
		}
		return ""
	})
	_ = call("StopChild g-1", func(ctx context.Context) error { return s.m.StopChild(ctx, "g-1") })
	pollUntil(t, elWait, func() string {
		if s.anyRunning(s.on0) || s.anyRunning(s.on1) {
			return "a member runs in a stopped group"
		}
		return ""
	})
	_ = call("StartChild g-1", func(ctx context.Context) error { return s.m.StartChild(ctx, "g-1") })
	// Shard 1 comes back (the thief's Lease expires): both run.
	elEventuallyWithin(t, 3*elWait, "a holds shard 1 again", func() bool { return holdsShard(t, s.m, 1) })
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	for _, c := range []string{s.on0, s.on1} {
		fsOrder(t, s.log.all(), "g-1/fleet/"+c)
	}

	// Removed: every member disengaged.
	require.NoError(t, call("RemoveChild g-1", func(ctx context.Context) error { return s.m.RemoveChild(ctx, "g-1") }))
	for _, c := range []string{s.on0, s.on1} {
		s.log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "g-1/fleet/"+c))
	}
	pollUntil(t, elWait, func() string {
		if s.anyRunning(s.on0) || s.anyRunning(s.on1) {
			return "a member runs after its fleet was removed"
		}
		return ""
	})
	for _, c := range []string{s.on0, s.on1} {
		fsOrder(t, s.log.all(), "g-1/fleet/"+c)
	}
	require.Error(t, fsWrite(c1), "disengaged")

	// Added again, under a plain group: engaged afresh, each on its shard.
	require.NoError(t, call("AddChild h", func(ctx context.Context) error {
		return s.m.AddChild(ctx, cm.NewGroup("h", cm.SupervisionSpec{}, s.fleet))
	}))
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "h/fleet") })
	st := mustStatus(t, s.m)
	require.Contains(t, st.Shards[0].Children, "h/fleet/"+s.on0+"/ctrl")
	require.Contains(t, st.Shards[1].Children, "h/fleet/"+s.on1+"/ctrl")
	for _, c := range []string{s.on0, s.on1} {
		fsOrder(t, s.log.all(), "h/fleet/"+c)
	}
}

// newFSReplica is replica id with a fleet over cfgs inside group "g-1" of
// AddShardedGroup, its controllers reporting to act.
func newFSReplica(t *testing.T, client *leasetest.Client, spec *cm.LeaderElectionSpec, id string, cfgs map[string]*rest.Config, act *activity) *fleetReplica {
	t.Helper()
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: spec, Supervision: gFast()}, "", cm.WithIdentity(id), elQuiet)
	require.NoError(t, err)
	r := &fleetReplica{id: id, mgr: m, builds: newBuilds()}
	fleet := cm.NewFleet("fleet", newHandProvider(cfgs), act.build(id, r.builds), fleetSpec())
	m.AddShardedGroup("g", cm.SupervisionSpec{}, func(sh cm.Shard) []cm.Runnable {
		if sh.Index == 1 {
			return []cm.Runnable{fleet}
		}
		return []cm.Runnable{&clusterCtrl{}}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return r
}

// Two replicas, the fleet inside a group of AddShardedGroup: a join, a
// stolen shard and a leave move the members with their shards; a member
// never runs on two replicas at once, and its writes pass only where its
// shard is held.
func TestAttackFleetInShardedGroupOverReplicas(t *testing.T) {
	t.Parallel()
	const shards = 3
	act := &activity{active: map[string]int{}}
	srv := leasetest.NewServer()
	spec := elSpec(cm.LeaseLostReelect)
	spec.Shards = shards
	clusters, cfgs := fakeClusters(t, 6)
	a := newFSReplica(t, srv.Client("a"), spec, "a", cfgs, act)
	b := newFSReplica(t, srv.Client("b"), spec, "b", cfgs, act)
	start := func(r *fleetReplica) {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		require.NoError(t, r.mgr.Start(ctx, 0), r.id)
	}
	writesOK := func(reps []*fleetReplica) string {
		for _, c := range clusters {
			shard := cm.ShardOf(c, shards)
			for _, r := range reps {
				if r.down || len(r.builds.of(c)) == 0 {
					continue
				}
				err := r.write(c)
				held := r.mgr.ShardLeaseGuard(shard) == nil
				if held && err != nil {
					return fmt.Sprintf("%s writing to %s (shard %d held): %v", r.id, c, shard, err)
				}
				if !held && err == nil {
					return fmt.Sprintf("%s wrote to %s without shard %d", r.id, c, shard)
				}
			}
		}
		return ""
	}
	start(a)
	pollUntil(t, 3*elWait, func() string { return spreadOK([]*fleetReplica{a}, clusters, shards) })
	b.down = true
	start(b)
	b.down = false
	reps := []*fleetReplica{a, b}
	pollUntil(t, 3*elWait, func() string {
		if why := holdsNoShard(reps, shards); why != "" {
			return why
		}
		if why := spreadOK(reps, clusters, shards); why != "" {
			return why
		}
		return writesOK(reps)
	})
	require.Empty(t, act.overlaps())

	// A shard a holds is stolen: its members stop on a; when the thief's
	// Lease expires they run on a or b.
	stolen := -1
	for i := range shards {
		if a.mgr.ShardLeaseGuard(i) == nil {
			stolen = i
			break
		}
	}
	require.NoError(t, srv.Steal(elNamespace, fmt.Sprintf("%s-%d", elLeaseName, stolen), "thief", elLeaseDuration))
	pollUntil(t, elWait, func() string {
		for _, c := range clusters {
			if cm.ShardOf(c, shards) == stolen && (a.running(c) || b.running(c)) {
				return c + " runs while its shard is stolen"
			}
		}
		return ""
	})
	pollUntil(t, 3*elWait, func() string {
		if why := spreadOK(reps, clusters, shards); why != "" {
			return why
		}
		return writesOK(reps)
	})
	require.Empty(t, act.overlaps())

	// b leaves: its members run on a.
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	b.mgr.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err())
	cancel()
	b.down = true
	pollUntil(t, 3*elWait, func() string {
		if why := spreadOK(reps, clusters, shards); why != "" {
			return why
		}
		return writesOK(reps)
	})
	for _, c := range clusters {
		require.False(t, b.running(c))
	}
	require.Empty(t, act.overlaps())
}

// fsProvider is a ClusterProvider that keeps its Run's context and
// callbacks for the test to call from many goroutines.
type fsProvider struct {
	mu        sync.Mutex
	ctx       context.Context
	engage    func(string, *rest.Config) error
	disengage func(string)
	initial   map[string]*rest.Config
}

func (p *fsProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.ctx, p.engage, p.disengage = ctx, engage, disengage
	p.mu.Unlock()
	for n, c := range p.initial {
		_ = engage(n, c)
	}
	<-ctx.Done()
	return nil
}

func (p *fsProvider) get() (context.Context, func(string, *rest.Config) error, func(string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx, p.engage, p.disengage
}

// Engage, disengage and ReportClusterProblem of the members race stolen
// shards and RestartChild/StopChild/StartChild of the enclosing group and
// of the fleet: every call returns within its context, and once the
// racing ends (the provider engages the members' configs, the groups are
// started) each member runs exactly where its shard is held, one build at
// a time, with its events in order.
func TestAttackFleetShardRaces(t *testing.T) {
	t.Parallel()
	var prov *fsProvider
	fs := startFSSetup(t, cm.LeaseLostReelect, func(cfgs map[string]*rest.Config) cm.ClusterProvider {
		prov = &fsProvider{initial: cfgs}
		return prov
	})
	m, srv, log, on0, on1, cfgs := fs.m, fs.srv, fs.log, fs.on0, fs.on1, fs.cfgs
	alt := map[string]*rest.Config{on0: newFakeMember(t, memberOK).config(), on1: newFakeMember(t, memberOK).config()}
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	pollUntil(t, elWait, func() string {
		if _, e, _ := prov.get(); e == nil {
			return "provider not running"
		}
		return ""
	})

	var wg sync.WaitGroup
	late := make(chan string, 100)
	call := func(what string, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		err := f(ctx)
		t.Logf("%s: %v", what, err)
		if ctx.Err() != nil {
			late <- what
		}
	}
	const rounds = 8
	for _, c := range []string{on0, on1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				pctx, engage, disengage := prov.get()
				switch i % 4 {
				case 0:
					_ = engage(c, alt[c])
				case 1:
					cm.ReportClusterProblem(pctx, c, fmt.Errorf("round %d", i))
				case 2:
					disengage(c)
				case 3:
					_ = engage(c, cfgs[c])
				}
				log.waitUntil(t, nil, 0, func() bool { return true })
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range rounds {
			switch i % 4 {
			case 0:
				call("RestartChild g-1", func(ctx context.Context) error { return m.RestartChild(ctx, "g-1") })
			case 1:
				call("StopChild g-1/fleet", func(ctx context.Context) error { return m.StopChild(ctx, "g-1/fleet") })
			case 2:
				call("StartChild g-1/fleet", func(ctx context.Context) error { return m.StartChild(ctx, "g-1/fleet") })
			case 3:
				call("RestartChild g-1/fleet", func(ctx context.Context) error { return m.RestartChild(ctx, "g-1/fleet") })
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = srv.Steal(elNamespace, elLeaseName+"-0", "thief", elLeaseDuration)
		_ = srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration/2)
	}()
	wg.Wait()
	close(late)
	for w := range late {
		t.Errorf("%s returned only past its context", w)
	}

	// Settle: both shards held again, the fleet started (a StopChild of it
	// holds until a StartChild: those sent while the replica stood down
	// were refused, ErrNotRunning), the members engaged on cfgs.
	elEventuallyWithin(t, 3*elWait, "a holds both shards again", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	for _, g := range []string{"g-1", "g-1/fleet"} {
		pollUntil(t, elWait, func() string {
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			if err := m.StartChild(ctx, g); err != nil && !errors.Is(err, supervisor.ErrAlreadyRunning) {
				return fmt.Sprintf("StartChild %s: %v", g, err)
			}
			return ""
		})
	}
	for _, c := range []string{on0, on1} {
		_, engage, _ := prov.get()
		require.NoError(t, engage(c, cfgs[c]))
	}
	s := fs
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	for _, c := range []string{on0, on1} {
		fsOrder(t, log.all(), "g-1/fleet/"+c)
	}
}

// Both shards stolen: the replica stands down (the runner, a store, stops
// too), the members' Cluster.Context() stay open and their writes are
// refused; when the shards come back, the same Clusters run again, with
// Restarts = runs-1.
func TestAttackFleetInShardedGroupStandDown(t *testing.T) {
	t.Parallel()
	s := newFSSetup(t)
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, s.m, 0) && holdsShard(t, s.m, 1) })
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	c := map[string]*clusterCtrl{s.on0: s.bl.of(s.on0)[0], s.on1: s.bl.of(s.on1)[0]}
	require.NoError(t, s.srv.Steal(elNamespace, elLeaseName+"-0", "thief", elLeaseDuration))
	require.NoError(t, s.srv.Steal(elNamespace, elLeaseName+"-1", "thief", elLeaseDuration))
	pollUntil(t, elWait, func() string {
		if s.anyRunning(s.on0) || s.anyRunning(s.on1) {
			return "a member runs without its shard"
		}
		return ""
	})
	for n, x := range c {
		require.Error(t, fsWrite(x.cluster), n)
		require.NoError(t, x.cluster.Context().Err(), n)
	}
	elEventuallyWithin(t, 3*elWait, "a holds both shards again", func() bool { return holdsShard(t, s.m, 0) && holdsShard(t, s.m, 1) })
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	for n, x := range c {
		require.Len(t, s.bl.of(n), 1, "%s built again", n)
		require.NoError(t, x.cluster.Context().Err(), n)
		require.NoError(t, fsWrite(x.cluster), n)
		cs := fsChild(t, s.m, "g-1/fleet/"+n+"/ctrl")
		require.Equal(t, int(x.runs.Load())-1, cs.Restarts, "%s: Restarts = runs-1", n)
		fsOrder(t, s.log.all(), "g-1/fleet/"+n)
	}
}

// OnLeaseLost Exit: a shard stolen stops the whole manager; the members'
// contexts end, ShutdownAndWait answers every caller, nothing runs.
func TestAttackFleetShardLostExit(t *testing.T) {
	t.Parallel()
	fs := startFSSetup(t, cm.LeaseLostExit, nil)
	m, srv, bl, log, on0, on1 := fs.m, fs.srv, fs.bl, fs.log, fs.on0, fs.on1
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	s := fs
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	require.NoError(t, srv.Steal(elNamespace, elLeaseName+"-0", "thief", elLeaseDuration))
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), elWait)
			defer cancel()
			select { // the manager exits on its own
			case <-m.Done():
			case <-ctx.Done():
			}
			m.ShutdownAndWait(ctx)
			errs[i] = m.Err()
			if ctx.Err() != nil {
				errs[i] = fmt.Errorf("past its context: %w", ctx.Err())
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		t.Logf("ShutdownAndWait %d: %v", i, err)
		require.NotContains(t, fmt.Sprint(err), "past its context")
		require.ErrorIs(t, err, lease.ErrLost)
	}
	for _, n := range []string{on0, on1} {
		for _, x := range bl.of(n) {
			require.Error(t, x.cluster.Context().Err(), "%s: context ended with the manager", n)
			require.Equal(t, x.runs.Load(), x.stops.Load(), n)
		}
		fsOrder(t, log.all(), "g-1/fleet/"+n)
	}
}

// runCtxs is a ClusterProvider that engages initial and records the
// context of every Run.
type runCtxs struct {
	mu      sync.Mutex
	ctxs    []context.Context
	initial map[string]*rest.Config
}

func (p *runCtxs) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.ctxs = append(p.ctxs, ctx)
	p.mu.Unlock()
	for n, c := range p.initial {
		_ = engage(n, c)
	}
	<-ctx.Done()
	return nil
}

func (p *runCtxs) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.ctxs {
		if c.Err() == nil {
			n++
		}
	}
	return n
}

// The fleet, running in g-1 under sharded leadership, is added a second
// time to the same manager, under another group. A fleet runs once: the
// add is refused (ErrFleetInUse), the members stay where they are, and
// once the manager has shut down no provider Run is left running.
//
// Before, the add was accepted: the fleet's runner ran twice, the first
// incarnation's provider and member loops were never cancelled (they ran
// on after ShutdownAndWait, a goroutine leak), and under -race its loops
// raced the second runner's Shutdown on the members' fields.
func TestAttackFleetAddedTwiceToOneManager(t *testing.T) {
	var prov *runCtxs
	s := startFSSetup(t, cm.LeaseLostReelect, func(cfgs map[string]*rest.Config) cm.ClusterProvider {
		prov = &runCtxs{initial: cfgs}
		return prov
	})
	m, fleet, shutdown := s.m, s.fleet, s.shutdown
	elEventually(t, "a holds both shards", func() bool { return holdsShard(t, m, 0) && holdsShard(t, m, 1) })
	pollUntil(t, 3*elWait, func() string { return s.settledOK(t, "g-1/fleet") })

	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	err := m.AddChild(ctx, cm.NewGroup("h", cm.SupervisionSpec{}, fleet))
	cancel()
	assert.ErrorIs(t, err, cm.ErrFleetInUse, "the fleet runs in g-1 already")
	_, ok := mustStatus(t, m).Child("h")
	assert.False(t, ok, "nothing of the refused add is in the tree")
	pollUntil(t, elWait, func() string { return s.settledOK(t, "g-1/fleet") })
	assert.Equal(t, 1, prov.live(), "one provider Run")

	shutdown()
	pollUntil(t, 3*time.Second, func() string {
		if n := prov.live(); n != 0 {
			return fmt.Sprintf("%d provider Run(s) still running after the manager shut down", n)
		}
		return ""
	})
}

// Added twice before Start (at the root and in a group): Start fails
// with ErrFleetInUse rather than run the fleet twice.
func TestAttackFleetAddedTwiceBeforeStart(t *testing.T) {
	prov := &runCtxs{}
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: gFast()}, "", elQuiet)
	require.NoError(t, err)
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	m.Add(fleet, cm.NewGroup("h", cm.SupervisionSpec{}, fleet))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	err = m.Start(ctx, 0)
	m.ShutdownAndWait(ctx)
	assert.ErrorIs(t, err, cm.ErrFleetInUse)
	assert.Zero(t, prov.live(), "provider Runs left after ShutdownAndWait")
}

// A fleet whose add was refused (its group's name taken) may be added
// again elsewhere: the refusal of a second add is only for a fleet in the
// tree.
func TestAttackFleetRefusedAddMayBeAddedAgain(t *testing.T) {
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), bl.build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()), cm.NewGroup("x", cm.SupervisionSpec{}, &clusterCtrl{}))
	startFleet(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	err := m.AddChild(ctx, cm.NewGroup("x", cm.SupervisionSpec{}, fleet))
	require.ErrorIs(t, err, supervisor.ErrDuplicateChild)
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("y", cm.SupervisionSpec{}, fleet)))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	require.ErrorIs(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)), cm.ErrFleetInUse)
	require.NoError(t, m.RemoveChild(ctx, "y"))
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "z/fleet/a"))
}

// fsStubborn engages initial, then waits for release, ignoring its
// context.
type fsStubborn struct {
	mu        sync.Mutex
	initial   map[string]*rest.Config
	release   chan struct{}
	disengage func(string)
}

func (p *fsStubborn) Run(_ context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.disengage = disengage
	p.mu.Unlock()
	for n, c := range p.initial {
		_ = engage(n, c)
	}
	<-p.release
	return nil
}

// The fleet is removed (its provider ignoring its context, so the runner's
// goroutines outlive the removal) and added again at another path before
// they return: its members are kept, as documented ("added again before
// that"), and their groups added under the new path. A member disengaged
// then must stop and leave the tree, and its events must name its group's
// path.
func TestAttackFleetReaddedElsewhereBeforeItsRunnerReturned(t *testing.T) {
	bl, prov, fleet, m, log := stubbornFleetOnlineInY(t)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	t.Logf("RemoveChild y: %v", m.RemoveChild(ctx, "y"))
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)))
	close(prov.release) // the first provider returns: the second runs
	pollUntil(t, elWait, func() string {
		cs, ok := mustStatus(t, m).Child("z/fleet/a/ctrl")
		if !ok || cs.State != supervisor.StateRunning {
			return "z/fleet/a/ctrl not running"
		}
		return ""
	})
	prov.mu.Lock()
	disengage := prov.disengage
	prov.mu.Unlock()
	disengage("a")
	pollUntil(t, 3*time.Second, func() string {
		if _, ok := mustStatus(t, m).Child("z/fleet/a"); ok {
			return "z/fleet/a still in the tree after a was disengaged"
		}
		for _, c := range bl.of("a") {
			if c.runs.Load() > c.stops.Load() {
				return "a's controller runs after a was disengaged"
			}
		}
		return ""
	})
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "z/fleet/a"))
	fsOrder(t, log.all(), "z/fleet/a")
}

// stubbornFleetOnlineInY starts a manager with a fleet in group "y" whose
// provider ignores its context until prov.release is closed, and waits
// until its member "a" is Online; ShutdownTimeout is 100ms, so that a
// removal of the fleet does not wait long for that provider.
func stubbornFleetOnlineInY(t *testing.T) (*builds, *fsStubborn, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	prov := &fsStubborn{initial: map[string]*rest.Config{"a": a.config()}, release: make(chan struct{})}
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	m, log := fleetManagerWith(t, clocktesting.NewFakeClock(time.Now()),
		cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{ShutdownTimeout: gDuration(100 * time.Millisecond)}},
		cm.NewGroup("y", cm.SupervisionSpec{}, fleet))
	startFleet(t, m)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	return bl, prov, fleet, m, log
}
