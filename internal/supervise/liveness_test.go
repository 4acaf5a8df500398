package supervise

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

func TestUnhealthyThresholdRestartsTheController(t *testing.T) {
	var release chan struct{}
	tests := []struct {
		name   string
		health func(sick *atomic.Bool) func() (bool, string)
		silent bool
		want   string
	}{{
		name: "unhealthy answers",
		health: func(sick *atomic.Bool) func() (bool, string) {
			return func() (bool, string) {
				if sick.Load() {
					return false, "queue stuck"
				}
				return true, ""
			}
		},
		want: "queue stuck",
	}, {
		name: "silence",
		health: func(sick *atomic.Bool) func() (bool, string) {
			return func() (bool, string) {
				if sick.Load() {
					<-release // does not answer: the probe's deadline speaks for it
				}
				return true, ""
			}
		},
		silent: true,
		want:   "no health answer within 1s",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release = make(chan struct{})
			defer close(release)
			h := newHarness(t, timing(func(t *Timing) {
				t.HealthInterval = 10 * time.Second
				t.HealthTimeout = time.Second
				t.UnhealthyThreshold = 3
			}))
			var sick atomic.Bool
			a := testchild.NewController("a", testchild.Behavior{Health: tt.health(&sick)})
			// A healthy sibling, except with silence: the fake clock can pass
			// the deadline before a healthy answer arrives in real time.
			b := testchild.NewController("b", testchild.Behavior{})
			specs := []childactor.Spec{controllerSpec(a)}
			if !tt.silent {
				specs = append(specs, controllerSpec(b))
			}
			h.start(specs...)

			// Healthy probes reset nothing and restart nothing.
			h.step(10 * time.Second)
			h.settleProbe()
			sick.Store(true)
			for i := 1; i <= 3; i++ {
				h.step(10 * time.Second) // the probe
				if tt.silent {
					h.step(time.Second) // its deadline
				}
				h.events.waitCount(t, supervisor.ChildUnhealthy, "a", i)
				if i < 3 {
					h.settleProbe()
				}
			}
			h.events.waitCount(t, supervisor.ChildFailed, "a", 1)
			sick.Store(false)
			h.waitState("a", supervisor.StateBackingOff)
			c := h.child("a")
			assert.ErrorIs(t, c.LastError, supervisor.ErrUnhealthy)
			assert.Contains(t, c.LastError.Error(), tt.want)
			assert.Contains(t, c.LastError.Error(), "unhealthy in 3 health probes in a row")
			h.step(100 * time.Millisecond)
			h.waitState("a", supervisor.StateRunning)
			if !tt.silent {
				assert.Zero(t, h.events.count(supervisor.ChildUnhealthy, "b"))
				assert.Equal(t, 1, runs(b))
			}
		})
	}
}

func TestAHealthyAnswerResetsTheCount(t *testing.T) {
	h := newHarness(t, timing(func(t *Timing) { t.HealthInterval = time.Second; t.UnhealthyThreshold = 2 }))
	var probes atomic.Int32
	a := testchild.NewController("a", testchild.Behavior{Health: func() (bool, string) {
		n := probes.Add(1)
		return n%2 == 0, "flaky" // unhealthy, healthy, unhealthy, ...
	}})
	h.start(controllerSpec(a))
	for i := 1; i <= 6; i++ {
		h.step(time.Second)
		require.True(t, testchild.Eventually(wait, func() bool { return probes.Load() >= int32(i) }),
			"probe %d: GetHealth called %d times, %d clock waiters", i, probes.Load(), h.clock.Waiters())
		h.settleProbe()
	}
	h.status()
	assert.Zero(t, h.events.count(supervisor.ChildFailed, "a"), "never two unhealthy probes in a row")
	assert.Equal(t, supervisor.StateRunning, h.child("a").State)
}
