package childactor_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// A sweep's deadline runs on the clock it is given: a silent entry holds it
// until that clock passes the timeout, and is then reported silent; abort
// ends the wait at once.
func TestHealthSweepDeadlineIsOnItsClock(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	for _, tt := range []struct {
		name  string
		abort bool
	}{{name: "deadline"}, {name: "abort", abort: true}} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			sweep := childactor.StartHealthSweep(system, clk, time.Second, func(col *childactor.HealthCollector) {
				col.Expect([]actors.HealthStatus{{Name: "answers"}, {Name: "silent"}}, []int{0, 1})
				system.Root.Send(col.PID(), childactor.HealthAnswer{Index: 0, Status: actors.HealthStatus{Healthy: true}})
			})
			abort := make(chan struct{})
			waited := make(chan struct{})
			go func() {
				sweep.Wait(abort)
				close(waited)
			}()
			select {
			case <-waited:
				t.Fatal("Wait returned with an entry unanswered, before the deadline")
			default:
			}
			if tt.abort {
				close(abort)
			} else {
				require.True(t, clk.HasWaiters(), "the deadline is a timer of the sweep's clock")
				clk.Step(time.Second)
			}
			select {
			case <-waited:
			case <-time.After(wait):
				t.Fatal("Wait did not return")
			}
			statuses, ok := sweep.Close()
			require.True(t, ok)
			assert.Equal(t, []actors.HealthStatus{
				{Name: "answers", Healthy: true},
				{Name: "silent", Message: "no health answer within 1s"},
			}, statuses)
		})
	}
}

// brood is a parent of n controllers spawned with one Spawner, each
// started with incarnation 1; it counts their Started and keeps their
// Failed.
type brood struct {
	specs   []childactor.Spec
	pids    []*actor.PID
	started chan struct{}

	mu     sync.Mutex
	failed []childactor.Failed
}

func (b *brood) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		spawner := childactor.NewSpawner(childactor.Config{})
		for i := range b.specs {
			b.pids = append(b.pids, spawner.Spawn(ctx, &b.specs[i], &childactor.Start{Gen: 1, Ctx: context.Background()}))
		}
	case childactor.Started:
		b.started <- struct{}{}
	case childactor.Failed:
		b.mu.Lock()
		b.failed = append(b.failed, m)
		b.mu.Unlock()
	}
}

// newBrood spawns a brood of ctrls and waits until every one has started.
func newBrood(t *testing.T, ctrls []*testchild.Controller) (*actor.ActorSystem, *brood) {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}), actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
	b := &brood{started: make(chan struct{}, len(ctrls))}
	for _, c := range ctrls {
		b.specs = append(b.specs, childactor.Spec{Name: c.Name(), Kind: actors.KindController, Impl: c})
	}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return b }))
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	for range ctrls {
		select {
		case <-b.started:
		case <-time.After(wait):
			t.Fatal("the children did not start")
		}
	}
	return system, b
}

// sweep has col expect one entry per child of b, the indexes of pending
// still to answer, then sends each child its query and dispatches.
func sweep(system *actor.ActorSystem, b *brood, col *childactor.HealthCollector, pending []int) {
	statuses := make([]actors.HealthStatus, len(b.specs))
	for i, spec := range b.specs {
		statuses[i].Name = spec.Name
	}
	col.Expect(statuses, pending)
	for i, pid := range b.pids {
		system.Root.Send(pid, childactor.HealthQuery{Index: i, Collector: col})
	}
	col.Dispatch()
}

// A GetHealth that hangs holds up no other child's answer: with two
// controllers hung at the head of the sweep's two halves (where each of
// two workers starts), every other one is answered while they still hang,
// the deadline far off. A second sweep while they hang calls neither
// again: its queries wait for the calls in flight, and take their answer.
func TestSweepAnswersEveryOtherChildWhileTwoHang(t *testing.T) {
	const n = 200
	hung := []int{0, n / 2}
	release := make(chan struct{})
	entered := make(chan struct{}, len(hung))
	ctrls := make([]*testchild.Controller, n)
	for i := range ctrls {
		ctrls[i] = testchild.NewController(fmt.Sprintf("c%03d", i), testchild.Behavior{})
	}
	for _, i := range hung {
		ctrls[i].Set(testchild.Behavior{Health: func() (bool, string) {
			entered <- struct{}{}
			<-release
			return false, "was stuck"
		}})
	}
	system, b := newBrood(t, ctrls)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	// The first sweep waits for every child but the hung ones (their
	// entries are final already), though it asks them too, first.
	first := childactor.NewHealthCollector(system)
	var pending []int
	for i := range n {
		if !slices.Contains(hung, i) {
			pending = append(pending, i)
		}
	}
	sweep(system, b, first, pending)
	select {
	case <-first.Done():
	case <-time.After(wait):
		t.Fatal("the healthy children were not answered while two hang")
	}
	for range hung {
		<-entered // both calls did begin: the answers above were not taken before them
	}
	statuses, ok := first.Close("silent")
	require.True(t, ok)
	for _, i := range pending {
		assert.Equal(t, actors.HealthStatus{Name: ctrls[i].Name(), Healthy: true}, statuses[i])
	}

	second := childactor.NewHealthCollector(system)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	sweep(system, b, second, all)
	select {
	case <-second.Done():
		t.Fatal("answered for the hung children before their calls returned")
	default:
	}
	close(release)
	released = true
	select {
	case <-second.Done():
	case <-time.After(wait):
		t.Fatal("the calls in flight did not answer the later sweep")
	}
	statuses, _ = second.Close("silent")
	for i, st := range statuses {
		want := actors.HealthStatus{Name: ctrls[i].Name(), Healthy: true}
		if slices.Contains(hung, i) {
			want = actors.HealthStatus{Name: ctrls[i].Name(), Message: "was stuck"}
		}
		assert.Equal(t, want, st)
	}
	for _, i := range hung {
		_, _, calls := ctrls[i].Counts()
		assert.Equal(t, 1, calls, "one GetHealth in flight per child, whatever the sweeps")
	}
}

// A GetHealth that panics on a sweep's worker is an unhealthy answer that
// names the child, and a failure of its incarnation; the other children
// answer as usual.
func TestSweepPanicInGetHealth(t *testing.T) {
	ctrls := []*testchild.Controller{
		testchild.NewController("calm", testchild.Behavior{}),
		testchild.NewController("buggy", testchild.Behavior{Health: func() (bool, string) { panic("health bug") }}),
	}
	system, b := newBrood(t, ctrls)
	col := childactor.NewHealthCollector(system)
	sweep(system, b, col, []int{0, 1})
	select {
	case <-col.Done():
	case <-time.After(wait):
		t.Fatal("no answers")
	}
	statuses, _ := col.Close("silent")
	assert.Equal(t, actors.HealthStatus{Name: "calm", Healthy: true}, statuses[0])
	assert.Equal(t, "buggy", statuses[1].Name)
	assert.False(t, statuses[1].Healthy)
	assert.Contains(t, statuses[1].Message, "panic in GetHealth: health bug")
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.failed) == 1
	}, wait, time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Equal(t, "buggy", b.failed[0].Name)
	assert.Equal(t, uint64(1), b.failed[0].Gen)
	var pe *actors.PanicError
	require.ErrorAs(t, b.failed[0].Err, &pe)
	assert.Equal(t, "buggy", pe.Child)
}

// Close may come while answers are being written (the deadline passing
// mid-sweep): every entry is then either its child's answer or marked
// silent, never half of each, and no answer lands after Close returned
// (the race detector watches the entries too).
func TestSweepCloseWhileAnswering(t *testing.T) {
	const n = 300
	ctrls := make([]*testchild.Controller, n)
	for i := range ctrls {
		ctrls[i] = testchild.NewController(fmt.Sprintf("c%03d", i), testchild.Behavior{Health: func() (bool, string) { return true, "fine" }})
	}
	system, b := newBrood(t, ctrls)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for range 20 {
		col := childactor.NewHealthCollector(system)
		sweep(system, b, col, all)
		statuses, ok := col.Close("silent")
		require.True(t, ok)
		closed := slices.Clone(statuses)
		for i, st := range statuses {
			if st.Message == "silent" {
				assert.Equal(t, actors.HealthStatus{Name: ctrls[i].Name(), Message: "silent"}, st)
				continue
			}
			assert.Equal(t, actors.HealthStatus{Name: ctrls[i].Name(), Healthy: true, Message: "fine"}, st)
		}
		// Once a later sweep is answered, every call of this one has
		// returned: none has written into the closed sweep's entries.
		next := childactor.NewHealthCollector(system)
		sweep(system, b, next, all)
		select {
		case <-next.Done():
		case <-time.After(wait):
			t.Fatal("no answers")
		}
		next.Close("silent")
		assert.Equal(t, closed, statuses)
	}
}

// A sweep may be closed before its queries are sent, or while they are
// (its deadline passing before the supervisor takes it, or during): the
// calls its queries start still run, and leave no child waiting on them,
// so the next sweep is answered by every child.
func TestSweepClosedBeforeOrWhileSent(t *testing.T) {
	const n = 100
	ctrls := make([]*testchild.Controller, n)
	for i := range ctrls {
		ctrls[i] = testchild.NewController(fmt.Sprintf("c%03d", i), testchild.Behavior{})
	}
	system, b := newBrood(t, ctrls)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for round := range 20 {
		col := childactor.NewHealthCollector(system)
		if round%2 == 0 {
			_, ok := col.Close("silent")
			require.False(t, ok)
			sweep(system, b, col, all)
		} else {
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				sweep(system, b, col, all)
			}()
			col.Close("silent")
			<-sent
		}
		next := childactor.NewHealthCollector(system)
		sweep(system, b, next, all)
		select {
		case <-next.Done():
		case <-time.After(wait):
			t.Fatalf("round %d: a closed sweep left children waiting on its calls", round)
		}
		statuses, _ := next.Close("silent")
		for i, st := range statuses {
			assert.Equal(t, actors.HealthStatus{Name: ctrls[i].Name(), Healthy: true}, st)
		}
	}
}
