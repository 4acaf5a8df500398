package supervise

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// TestRandomFailuresKeepTheBooks fails 100 children at random for a while,
// by every route there is, and checks that the supervisor's accounting (its
// events and its status) agrees with the children's own records.
func TestRandomFailuresKeepTheBooks(t *testing.T) {
	const n = 100
	injections := 1500
	if testing.Short() {
		injections = 300
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var rngMu sync.Mutex
	chance := func(p float64) bool {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64() < p
	}

	h := newHarness(t, Timing{
		InitialBackoff: 50 * time.Microsecond, MaxBackoff: time.Millisecond,
		HealthInterval: 2 * time.Millisecond, HealthTimeout: 20 * time.Millisecond, UnhealthyThreshold: 2,
		ShutdownTimeout: wait,
	}, withRealClock(), withPolicy(func(p *Policy) {
		*p = Policy{Strategy: supervisor.OneForOne, MaxRestarts: 1 << 30, RestartWindow: time.Minute}
	}))

	var calm sync.RWMutex // held for writing once the chaos is over
	chaos := true
	inChaos := func() bool { calm.RLock(); defer calm.RUnlock(); return chaos }
	ctrls := make([]*testchild.Controller, n)
	specs := make([]childactor.Spec, n)
	for i := range ctrls {
		ctrls[i] = testchild.NewController(fmt.Sprintf("c%03d", i), testchild.Behavior{
			Run: func(_ context.Context, run int) error {
				if run == 1 || !inChaos() {
					return nil
				}
				switch {
				case chance(0.05):
					return errors.New("run failed")
				case chance(0.02):
					panic("run panicked")
				}
				return nil
			},
			Health: func() (bool, string) {
				if inChaos() && chance(0.01) {
					return false, "sick"
				}
				return true, ""
			},
		})
		specs[i] = controllerSpec(ctrls[i])
	}
	h.start(specs...)

	for range injections {
		c := ctrls[rngIntN(rng, &rngMu, n)]
		switch r := rngIntN(rng, &rngMu, 100); {
		case r < 80:
			c.Fail(errors.New("background failure"))
		case r < 88:
			_, _ = h.ask(supervisor.RestartChild{Name: c.Name()}) // busy children refuse: fine
		case r < 94:
			_, _ = h.ask(supervisor.StopChild{Name: c.Name()})
		default:
			_, _ = h.ask(supervisor.StartChild{Name: c.Name()})
		}
	}

	calm.Lock()
	chaos = false
	calm.Unlock()
	// Bring every child back, then wait for the tree to settle.
	require.True(t, testchild.Eventually(3*wait, func() bool {
		settled := true
		for _, c := range h.status().Children {
			switch c.State {
			case supervisor.StateRunning:
			case supervisor.StateStopped:
				_, _ = h.ask(supervisor.StartChild{Name: c.Name})
				settled = false
			default:
				settled = false
			}
		}
		return settled
	}), "the tree did not settle")
	assert.Equal(t, supervisor.PhaseRunning, h.status().Phase, "nothing escalated")

	_, err := h.ask(supervisor.ShutdownManager{Ctx: context.Background()})
	require.NoError(t, err)
	<-h.handle.Observed.Terminated()
	<-h.handle.Bus.Drained()
	final, ok := h.handle.Observed.Final()
	require.True(t, ok)

	var failures, restarts int
	for _, c := range ctrls {
		st, ok := final.Child(c.Name())
		require.True(t, ok)
		r, s, _ := c.Counts()
		assert.Equal(t, r-1, st.Restarts, "%s: status restarts vs. its own runs", c.Name())
		assert.Equal(t, st.Restarts, h.events.count(supervisor.ChildRestarted, c.Name()), "%s: restarts in events vs. status", c.Name())
		assert.Equal(t, st.Failures, h.events.count(supervisor.ChildFailed, c.Name()), "%s: failures in events vs. status", c.Name())
		assert.Equal(t, r, s, "%s: every Run is followed by exactly one Shutdown", c.Name())
		active := c.Active()
		for i := 1; i < len(active); i++ {
			assert.False(t, active[i].Start.Before(active[i-1].End), "%s: incarnations overlap", c.Name())
		}
		failures += st.Failures
		restarts += st.Restarts
	}
	t.Logf("%d failures, %d restarts over %d children", failures, restarts, n)
	assert.Positive(t, failures)
}

func rngIntN(rng *rand.Rand, mu *sync.Mutex, n int) int {
	mu.Lock()
	defer mu.Unlock()
	return rng.IntN(n)
}
