package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// An AddChild of the fleet sent with Send (no answer awaited) that the
// supervisor refuses (its group's name is taken) leaves nothing of the
// fleet in the tree: a later add of it is accepted, not refused with
// ErrFleetInUse.
//
// Before, the fleet was counted as placed when the add was sent, and only
// a Request that saw its refusal uncounted it: every later add was refused.
func TestAttackFleetSentAddRefusedMayBeAddedAgain(t *testing.T) {
	a := newFakeMember(t, memberOK)
	fleet := cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), newBuilds().build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()), cm.NewGroup("x", cm.SupervisionSpec{}, &clusterCtrl{}))
	startFleet(t, m)
	m.Send(supervisor.AddChild{Runnable: cm.NewGroup("x", cm.SupervisionSpec{}, fleet)}) // refused: "x" is taken
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("y", cm.SupervisionSpec{}, fleet)),
		"the fleet is in no tree: its sent add was refused")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	_, inX := mustStatus(t, m).Child("x/fleet")
	require.False(t, inX, "nothing of the refused add is in the tree")
}

// slowNamer is a child whose Name blocks until release is closed, then
// gives a name the supervisor refuses ("/" in it).
type slowNamer struct {
	called  chan struct{}
	release chan struct{}
}

func (s *slowNamer) Name() string {
	close(s.called)
	<-s.release
	return "bad/name"
}
func (s *slowNamer) Run(context.Context) error { return nil }
func (s *slowNamer) Shutdown(context.Context)  {}
func (s *slowNamer) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "bad/name", Healthy: true}
}

// An AddChild of the fleet whose context ends before the supervisor
// answers, and which the supervisor then refuses (a child of its group has
// an invalid name), leaves nothing of the fleet in the tree: a later add of
// it is accepted.
//
// Before, the caller who gave up never learnt of the refusal, and the fleet
// stayed counted as placed: every later add was refused with ErrFleetInUse.
func TestAttackFleetAddAbandonedThenRefusedMayBeAddedAgain(t *testing.T) {
	a := newFakeMember(t, memberOK)
	fleet := cm.NewFleet("fleet", newHandProvider(map[string]*rest.Config{"a": a.config()}), newBuilds().build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()))
	startFleet(t, m)
	slow := &slowNamer{called: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(slow.release)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() { answered <- m.AddChild(ctx, cm.NewGroup("w", cm.SupervisionSpec{}, fleet, slow)) }()
	awaitRecv(t, slow.called, "the naming of the add's children")
	cancel()
	require.ErrorIs(t, <-answered, context.Canceled)
	close(slow.release) // the supervisor names the child now, and refuses the add
	released = true

	ctx2, cancel2 := context.WithTimeout(context.Background(), elWait)
	defer cancel2()
	require.NoError(t, m.AddChild(ctx2, cm.NewGroup("y", cm.SupervisionSpec{}, fleet)),
		"the fleet is in no tree: its abandoned add was refused")
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "y/fleet/a"))
	_, inW := mustStatus(t, m).Child("w")
	require.False(t, inW, "nothing of the refused add is in the tree")
}

// An add that brings two fleets, the second in the tree already, is refused
// whole (ErrFleetInUse); the first, which the supervisor had taken as
// added before the second refused, is told the add was refused after all
// and may be added again, at its new path.
func TestAttackFleetRefusedWithAFleetInUseMayBeAddedAgain(t *testing.T) {
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	inUse := cm.NewFleet("in-use", newHandProvider(map[string]*rest.Config{"a": a.config()}), newBuilds().build, fleetSpec())
	fresh := cm.NewFleet("fresh", newHandProvider(map[string]*rest.Config{"b": b.config()}), newBuilds().build, fleetSpec())
	m, log := fleetManager(t, clocktesting.NewFakeClock(time.Now()), inUse)
	startFleet(t, m)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "in-use/a"))
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.ErrorIs(t, m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{}, fresh, inUse)), cm.ErrFleetInUse)
	_, inG := mustStatus(t, m).Child("g")
	require.False(t, inG, "nothing of the refused add is in the tree")
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("h", cm.SupervisionSpec{}, fresh)))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "h/fresh/b"))
	st, ok := fresh.Cluster("b")
	require.True(t, ok)
	require.Equal(t, "h/fresh/b", st.Path)
}
