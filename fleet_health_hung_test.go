package controllermanager_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// healthHangCtrl is a member's controller whose GetHealth blocks while hang is set.
type healthHangCtrl struct {
	hang    atomic.Bool
	release chan struct{}
	runs    atomic.Int32
	stops   atomic.Int32
}

func (c *healthHangCtrl) Run(context.Context) error { c.runs.Add(1); return nil }
func (c *healthHangCtrl) Shutdown(context.Context)  { c.stops.Add(1) }
func (c *healthHangCtrl) Name() string              { return "ctrl" }
func (c *healthHangCtrl) GetHealth() cm.HealthStatus {
	if c.hang.Load() {
		<-c.release
	}
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

// A member's controller whose GetHealth hangs (a call to its cluster
// with no deadline) is said unhealthy within its HealthTimeout (its
// HealthTimeout on the manager's clock); the
// manager's GetHealth still answers, with the other member's controller
// healthy; and the member is disengaged while the call still hangs,
// without touching the other member.
func TestFleetHungMemberHealthIsContained(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	ctrls := map[string][]*healthHangCtrl{}
	build := func(c cm.Cluster) []cm.Runnable {
		h := &healthHangCtrl{release: release}
		mu.Lock()
		ctrls[c.Name()] = append(ctrls[c.Name()], h)
		mu.Unlock()
		return []cm.Runnable{h}
	}
	spec := fleetSpec()
	spec.Supervision.HealthInterval = metav1.Duration{Duration: time.Second}
	spec.Supervision.HealthTimeout = metav1.Duration{Duration: time.Second}
	// Not restarted for it: an answer judged late because the test stepped
	// the fake clock past it must not restart a either.
	spec.Supervision.UnhealthyThreshold = 1000
	fleet := cm.NewFleet("fleet", prov, build, spec)
	mgr, log := fleetManager(t, clk, fleet)
	t.Cleanup(free)
	startFleet(t, mgr)
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/a"))
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/b"))
	mu.Lock()
	hb := ctrls["b"][0]
	mu.Unlock()
	hb.hang.Store(true)
	// The manager's health answers, bounded, while b's GetHealth hangs.
	done := make(chan struct{})
	var health []cm.HealthStatus
	go func() {
		defer close(done)
		health = mgr.GetHealth()
	}()
	log.waitUntil(t, clk, time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	// b is restarted for its hung health (or reported), a is untouched.
	log.waitForNthStepping(t, clk, 1, func(e cm.Event) bool {
		return e.Child == "fleet/b/ctrl" && (e.Type == cm.ChildFailed || e.Type == cm.ChildUnhealthy)
	})
	// Disengage b while its old GetHealth still hangs.
	prov.Disengage(t, "b")
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterDisengaged, "fleet/b"))
	hb.hang.Store(false)
	mu.Lock()
	ha := ctrls["a"][0]
	mu.Unlock()
	require.Equal(t, int32(1), ha.runs.Load(), "a's controller was restarted")
	require.Zero(t, ha.stops.Load())
	st, ok := fleetChild(t, mgr, "fleet/a/ctrl")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, st.State)
	// Both are listed; b unhealthy. (a's own answer may be judged late
	// too: the test steps the fake clock the sweep's deadline is on.)
	byName := map[string]bool{}
	for _, h := range health {
		byName[h.Name] = h.Healthy
	}
	require.Contains(t, byName, "fleet/a/ctrl")
	require.Contains(t, byName, "fleet/b/ctrl")
	require.False(t, byName["fleet/b/ctrl"])
}
