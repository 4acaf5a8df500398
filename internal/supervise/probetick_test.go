package supervise

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// The probe ticks at the shortest HealthInterval of the levels that have
// something to probe, and lengthens again once the group that made it
// shorter is gone: before, a group with a 20 ms interval, added and
// removed, left the manager ticking every 20 ms for good.
func TestTheProbeTickFollowsTheShortestLevelBothWays(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	var ticks atomic.Int32
	p := prober{clock: clk, interval: time.Second, tick: func() { ticks.Add(1) }}
	top := &level{probeTiming: healthTiming{interval: time.Second}}
	fast := &level{probeTiming: healthTiming{interval: 20 * time.Millisecond}, parent: top}
	rec := func(lvl *level, kind actors.Kind) *childRecord {
		return &childRecord{spec: childactor.Spec{Name: string(kind), Kind: kind}, lvl: lvl}
	}
	var reg registry
	reg.add(rec(top, actors.KindController))
	inFast := rec(fast, actors.KindController)
	reg.add(inFast)
	reg.add(rec(fast, actors.KindStore)) // a store is not probed: its level's interval is not counted for it

	p.start()
	p.shorten(fast.probeTiming.interval) // the group is added
	require.Equal(t, 20*time.Millisecond, reg.shortestProbe(time.Second))

	// A tick at 20 ms; the next is armed at 20 ms while the group is there.
	clk.Step(20 * time.Millisecond)
	require.EqualValues(t, 1, ticks.Load())
	require.True(t, p.due())
	p.arm(reg.shortestProbe(time.Second))
	clk.Step(20 * time.Millisecond)
	require.EqualValues(t, 2, ticks.Load())

	// The group's controller is removed: the next tick is a second away.
	reg.dropHosted(inFast)
	require.Equal(t, time.Second, reg.shortestProbe(time.Second))
	require.True(t, p.due())
	p.arm(reg.shortestProbe(time.Second))
	for range 49 {
		clk.Step(20 * time.Millisecond)
	}
	require.EqualValues(t, 2, ticks.Load(), "no tick before the manager's interval")
	clk.Step(20 * time.Millisecond)
	require.EqualValues(t, 3, ticks.Load())

	// Stopped for good: due refuses, and nothing is armed.
	p.stop()
	require.False(t, p.due())
}
