package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// The fleet's runner alone is removed (RemoveChild("y/fleet/provider"): its
// group and its members' groups stay), its provider ignoring its context
// so that the runner's goroutines outlive the removal. The fleet is still
// in the tree (its group is): an add of it under another group is refused
// (ErrFleetInUse) until its group is removed, then accepted; once the old
// runner returns no member group is left at the old path.
//
// Before, the add was accepted (the runner's removal counted as the
// fleet's): the members moved to the new path and their groups were added
// there, while their groups at the old path stayed in the tree, their
// controllers running: two subtrees per cluster (3/3).
func TestAttackTreeRunnerRemovedAloneThenMovedLeavesNoOldGroups(t *testing.T) {
	_, prov, fleet, m, log := stubbornFleetOnlineInY(t)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	t.Logf("RemoveChild y/fleet/provider: %v", m.RemoveChild(ctx, "y/fleet/provider")) // overruns: the provider ignores ctx
	require.ErrorIs(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)), cm.ErrFleetInUse,
		"the fleet's group, with its members' groups, is still in the tree at y/fleet")
	require.NoError(t, m.RemoveChild(ctx, "y/fleet"))
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("z", cm.SupervisionSpec{}, fleet)))
	close(prov.release)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "z/fleet/a"))
	pollUntil(t, 3*time.Second, func() string {
		if _, ok := mustStatus(t, m).Child("y/fleet/a"); ok {
			return "y/fleet/a still in the tree: the cluster runs at y/fleet/a and at z/fleet/a"
		}
		return ""
	})
}

// The cluster is disengaged and engaged again on the same config after the
// member's loop built its subtree and looked that it is still wanted, but
// before the supervisor took the add (while it names the subtree's
// children). The engage made a new Cluster: the subtree built on the
// disengaged one (its Context ended) is refused as the add is taken, and
// the one built on the new Cluster runs. With disengage alone, nothing of
// the cluster stays in the tree.
func TestAttackTreeMemberDisengagedAndEngagedDuringItsAdd(t *testing.T) {
	for _, again := range []bool{true, false} {
		t.Run(map[bool]string{true: "engaged again", false: "disengaged"}[again], func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			a := newFakeMember(t, memberOK)
			prov := newHandProvider(nil)
			bl := newBuilds()
			build, first := firstBuildRotates(bl, func() {
				prov.mu.Lock()
				engage, disengage := prov.engage, prov.disengage
				prov.mu.Unlock()
				disengage("a")
				if again {
					if err := engage("a", a.config()); err != nil {
						panic(err)
					}
				}
			})
			fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
			mgr, log := fleetManager(t, clk, fleet)
			startFleet(t, mgr)
			require.NoError(t, prov.Engage(t, "a", a.config()))
			if again {
				log.waitUntil(t, clk, fleetPeriod, func() bool {
					st, ok := fleet.Cluster("a")
					return ok && st.State == cm.ClusterStateOnline && len(bl.of("a")) >= 2 && bl.of("a")[1].runs.Load() > 0
				})
				cs := bl.of("a")
				require.Len(t, cs, 2, "built once per Cluster")
				require.NoError(t, cs[1].cluster.Context().Err())
			} else {
				log.waitFor(t, clk, fleetPeriod, is(cm.ClusterDisengaged, "fleet/a"))
				_, ok := fleetChild(t, mgr, "fleet/a")
				require.False(t, ok, "fleet/a in the tree after it was disengaged")
			}
			require.NotNil(t, first())
			require.Zero(t, first().runs.Load(), "the subtree built on the disengaged Cluster ran")
			require.Error(t, first().cluster.Context().Err())
		})
	}
}

// A fleet two groups down (g/h/fleet) whose groups were stopped by request
// (StopChild of g: its runner's Shutdown keeps the clusters, as a
// stand-down does) hears the manager's stop all the same: every Cluster it
// built ends with the manager. The supervisor tells every record with a
// TreeHook, at any depth, not only the root's children.
func TestAttackTreeNestedFleetStoppedThenShutdownEndsClusters(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, cm.NewGroup("g", cm.SupervisionSpec{}, cm.NewGroup("h", cm.SupervisionSpec{}, fleet)))
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "g/h/fleet/a"))
	stopThenShutdownEndsClusters(t, mgr, bl, "g")
}

// A Start whose children include a fleet (in a group) and that fails in
// Starting (another controller's Run fails): the fleet was told it was
// added (its runner may have run, and engaged its cluster), then that the
// manager stopped. Nothing of it runs on past ShutdownAndWait, and it stays
// the failed manager's (a Fleet runs in the manager it was first added
// to): a second manager refuses it and runs nothing of it.
func TestAttackTreeStartFailsWithAFleet(t *testing.T) {
	a := newFakeMember(t, memberOK)
	prov := &runCtxs{initial: map[string]*rest.Config{"a": a.config()}}
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	m := newManager(t, nil, gFast())
	errBoom := errors.New("boom")
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, fleet),
		testchild.NewController("c", testchild.Behavior{Run: func(context.Context, int) error { return errBoom }}))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.ErrorIs(t, m.Start(ctx, 0), errBoom)
	m.ShutdownAndWait(ctx)
	require.NoError(t, ctx.Err())
	require.Zero(t, prov.live(), "the provider runs on after the failed manager stopped")

	m2 := newManager(t, nil, gFast())
	m2.Add(fleet)
	require.ErrorIs(t, m2.Start(ctx, 0), cm.ErrFleetInUse)
	require.Zero(t, prov.live())
}

// The same *Fleet is moved from group to group: each RemoveChild of the
// group that holds it races an AddChild of it in the next group, while the
// provider churns a member's config and engagement. Until the removal is
// answered an add is refused with ErrFleetInUse only; once it is answered
// the add is accepted. Once the churn ends every member runs at the last
// path, nothing of the fleet is left at an earlier one, and the members'
// events come in order at every path.
//
// Before, a member engaged while the fleet moved could join the fleet's
// members after their repath with the path it was given before the move:
// its group was added at the new path while its status, events and
// disengage named the old one (b Online at g4/fleet/b, its controller at
// g6/fleet/b; about 1 in 700 runs under load, 0 in 960 after).
func TestAttackTreeFleetMovedRepeatedlyWhileMembersEngage(t *testing.T) {
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := &fsProvider{initial: map[string]*rest.Config{"a": a.config()}}
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()), cm.NewGroup("g0", cm.SupervisionSpec{}, fleet))
	startFleet(t, m)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "g0/fleet/a"))

	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, engage, disengage := prov.get()
			if i%3 == 2 {
				disengage("b")
				continue
			}
			cfg := b.config()
			cfg.BearerToken = fmt.Sprintf("token-%d", i%2)
			_ = engage("b", cfg)
			runtime.Gosched()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	const moves = 6
	for i := 1; i <= moves; i++ {
		from, to := fmt.Sprintf("g%d", i-1), fmt.Sprintf("g%d", i)
		removed := make(chan error, 1)
		go func() { removed <- m.RemoveChild(ctx, from) }()
		var added bool
		for !added {
			select {
			case err := <-removed:
				require.NoError(t, err)
				require.NoError(t, m.AddChild(ctx, cm.NewGroup(to, cm.SupervisionSpec{}, fleet)), "added after its removal was answered")
				added = true
				continue
			default:
			}
			err := m.AddChild(ctx, cm.NewGroup(to, cm.SupervisionSpec{}, fleet))
			if err == nil {
				require.NoError(t, <-removed)
				added = true
				break
			}
			require.ErrorIs(t, err, cm.ErrFleetInUse, "move %d", i)
		}
	}
	close(stop)
	<-churned
	_, engage, _ := prov.get()
	require.NoError(t, engage("b", b.config()))
	last := fmt.Sprintf("g%d/fleet", moves)
	for _, name := range []string{"a", "b"} {
		log.waitFor(t, nil, 0, func(e cm.Event) bool {
			st, ok := fleet.Cluster(name)
			return ok && st.State == cm.ClusterStateOnline && st.Path == last+"/"+name
		})
	}
	st := mustStatus(t, m)
	for i := 0; i < moves; i++ {
		_, ok := st.Child(fmt.Sprintf("g%d", i))
		require.False(t, ok, "g%d still in the tree", i)
	}
	for _, name := range []string{"a", "b"} {
		cs, ok := st.Child(last + "/" + name + "/ctrl")
		require.True(t, ok)
		require.Equal(t, supervisor.StateRunning, cs.State)
	}
	events := log.all()
	for i := 0; i <= moves; i++ {
		for _, name := range []string{"a", "b"} {
			fsOrder(t, events, fmt.Sprintf("g%d/fleet/%s", i, name))
		}
	}
}

// The manager shuts down while an AddChild of a group holding a fleet is in
// flight: before the supervisor has named the group's children (the add
// is refused, not admitted), or once admitted while a controller started
// before the fleet's runner blocks its start. The add is answered,
// ShutdownAndWait returns within its context, and no provider Run is left
// running.
func TestAttackTreeManagerStopsDuringAFleetsAdd(t *testing.T) {
	t.Run("naming", func(t *testing.T) {
		a := newFakeMember(t, memberOK)
		prov := &runCtxs{initial: map[string]*rest.Config{"a": a.config()}}
		fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
		m, _ := fleetManager(t, clocktesting.NewFakeClock(time.Now()))
		startFleet(t, m)
		slow := &slowNamer{called: make(chan struct{}), release: make(chan struct{})}
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		answered := make(chan error, 1)
		go func() { answered <- m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{}, fleet, slow)) }()
		awaitRecv(t, slow.called, "the naming of the add's children")
		down := make(chan struct{})
		go func() { defer close(down); m.ShutdownAndWait(ctx) }()
		select {
		case <-m.Done():
		case <-ctx.Done():
		}
		close(slow.release)
		<-down
		require.NoError(t, ctx.Err())
		require.Error(t, <-answered)
		require.Zero(t, prov.live())
	})
	t.Run("starting", func(t *testing.T) {
		a := newFakeMember(t, memberOK)
		prov := &runCtxs{initial: map[string]*rest.Config{"a": a.config()}}
		fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
		m, _ := fleetManager(t, clocktesting.NewFakeClock(time.Now()))
		startFleet(t, m)
		started := make(chan struct{})
		var once sync.Once
		blocker := testchild.NewController("blocker", testchild.Behavior{Run: func(ctx context.Context, _ int) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return ctx.Err()
		}})
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		answered := make(chan error, 1)
		go func() { answered <- m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{}, blocker, fleet)) }()
		awaitRecv(t, started, "the blocker's start")
		m.ShutdownAndWait(ctx)
		require.NoError(t, ctx.Err())
		t.Logf("AddChild: %v", <-answered)
		require.Zero(t, prov.live())
	})
}

// gatedProvider engages initial at each Run, the Run numbered n (from 0)
// once gates[n] is closed when there is one, then waits for its context.
type gatedProvider struct {
	mu      sync.Mutex
	runs    int
	gates   map[int]chan struct{}
	initial map[string]*rest.Config
}

func (p *gatedProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, _ func(string)) error {
	p.mu.Lock()
	gate := p.gates[p.runs]
	p.runs++
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil
		}
	}
	for n, c := range p.initial {
		_ = engage(n, c)
	}
	<-ctx.Done()
	return nil
}

// A member's subtree add is in flight (the supervisor names its children)
// when the fleet's group is removed, and the fleet, its members
// disengaged by the removal (their Clusters ended), is added again at the
// same path. The stale add, built on the ended Cluster of a member that is
// no longer the fleet's, lands after the fleet's group is back: it is
// refused as the supervisor takes it, and the cluster, engaged again,
// runs its new build only.
//
// Before, the member's group hook checked only whether the member was
// disengaged by its provider or engaged again: the stale subtree was
// added under the new fleet group on the ended Cluster; the new member
// found "its" group in the tree (ErrDuplicateChild) and adopted it, and
// its new build never ran (4/4).
func TestAttackTreeStaleMemberAddAfterTheFleetIsReadded(t *testing.T) {
	a := newFakeMember(t, memberOK)
	engageAgain := make(chan struct{})
	prov := &gatedProvider{initial: map[string]*rest.Config{"a": a.config()}, gates: map[int]chan struct{}{1: engageAgain}}
	bl := newBuilds()
	naming, release := make(chan struct{}), make(chan struct{})
	build, first := firstBuildRotates(bl, func() {
		close(naming)
		<-release
	})
	fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()), cm.NewGroup("y", cm.SupervisionSpec{}, fleet))
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	startFleet(t, m)
	awaitRecv(t, naming, "the naming of a's first subtree")
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.RemoveChild(ctx, "y"))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "y/fleet/a"))
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("y", cm.SupervisionSpec{}, fleet)))
	close(release) // the stale add goes on, the fleet's group back in the tree
	released = true
	close(engageAgain)
	pollUntil(t, elWait, func() string {
		st, ok := fleet.Cluster("a")
		if !ok || st.State != cm.ClusterStateOnline {
			return fmt.Sprintf("a: %+v", st)
		}
		b := bl.of("a")
		if last := b[len(b)-1]; last.runs.Load() == 0 || last.cluster.Context().Err() != nil {
			return fmt.Sprintf("the latest build (%d of %d) does not run on a live Cluster: runs %d, Context %v", len(b), len(b), last.runs.Load(), last.cluster.Context().Err())
		}
		return ""
	})
	require.Error(t, first().cluster.Context().Err(), "the first Cluster ended with the fleet's removal")
	require.Zero(t, first().runs.Load(), "the stale subtree, built on the ended Cluster, ran")
}
