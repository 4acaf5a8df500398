package controllermanager_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// probedCtrl is a controller whose GetHealth says healthy or not, or,
// with block set, does not answer until block is closed.
type probedCtrl struct {
	name    string
	healthy bool
	block   <-chan struct{}
	asked   atomic.Int32
}

func (c *probedCtrl) Name() string              { return c.name }
func (c *probedCtrl) Run(context.Context) error { return nil }
func (c *probedCtrl) Shutdown(context.Context)  {}
func (c *probedCtrl) GetHealth() cm.HealthStatus {
	c.asked.Add(1)
	if c.block != nil {
		<-c.block
	}
	return cm.HealthStatus{Name: c.name, Healthy: c.healthy, Message: "probed"}
}

// A group's HealthInterval and UnhealthyThreshold are its own: its sick
// controller fails on its first probe, 20 ms in, while the manager's,
// probed hourly, is never asked.
func TestGroupHealthIntervalAndThresholdAreItsOwn(t *testing.T) {
	sup := gFast()
	sup.HealthInterval = gDuration(time.Hour)
	m := newManager(t, nil, sup)
	rec := record(m)
	inGroup, atRoot := &probedCtrl{name: "sick"}, &probedCtrl{name: "sick"}
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{HealthInterval: gDuration(20 * time.Millisecond), UnhealthyThreshold: 1}, inGroup), atRoot)
	gStart(t, m)

	gEventually(t, "g/sick restarted twice", func() bool { return rec.gCount(cm.ChildRestarted, "g/sick") >= 2 })
	failure := rec.firstErr(cm.ChildFailed, "g/sick")
	assert.ErrorContains(t, failure, "unhealthy in 1 health probes in a row")
	assert.Zero(t, atRoot.asked.Load(), "the manager's controllers are probed at the manager's interval")
	assert.Zero(t, rec.gCount(cm.ChildUnhealthy, "sick"))
	g, ok := mustStatus(t, m).Child("g")
	require.True(t, ok)
	require.NotNil(t, g.Group)
	assert.Equal(t, 20*time.Millisecond, g.Group.HealthInterval)
	assert.Equal(t, time.Second, g.Group.HealthTimeout, "inherited")
	assert.Equal(t, 1, g.Group.UnhealthyThreshold)
}

// A group's HealthTimeout is its own: probed at the same tick as the
// manager's controller, whose answer may take an hour, its silent
// controller fails after 5 ms of silence; the manager's is not judged.
func TestGroupHealthTimeoutIsItsOwn(t *testing.T) {
	sup := gFast()
	sup.HealthInterval = gDuration(20 * time.Millisecond)
	sup.HealthTimeout = gDuration(time.Hour)
	m := newManager(t, nil, sup)
	rec := record(m)
	block := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(block) }) })
	silentInGroup := &probedCtrl{name: "silent", healthy: true, block: block}
	silentAtRoot := &probedCtrl{name: "silent", healthy: true, block: block}
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{HealthTimeout: gDuration(5 * time.Millisecond), UnhealthyThreshold: 1}, silentInGroup), silentAtRoot)
	gStart(t, m)

	gEventually(t, "g/silent failed", func() bool { return rec.gCount(cm.ChildFailed, "g/silent") >= 1 })
	failure := rec.firstErr(cm.ChildFailed, "g/silent")
	require.Error(t, failure)
	assert.ErrorContains(t, failure, "no health answer within 5ms")
	gEventually(t, "the manager's asked", func() bool { return silentAtRoot.asked.Load() >= 1 })
	assert.Zero(t, rec.gCount(cm.ChildUnhealthy, "silent"), "its answer may take an hour")
	assert.Zero(t, rec.gCount(cm.ChildFailed, "silent"))
	once.Do(func() { close(block) })
}

// A group added at run time with a shorter HealthInterval than any level
// before it makes the probe tick at it: its sick controller fails 20 ms
// in, where the manager ticks hourly.
func TestGroupAddedWithAShorterHealthIntervalIsProbedAtIt(t *testing.T) {
	sup := gFast()
	sup.HealthInterval = gDuration(time.Hour)
	m := newManager(t, nil, sup)
	rec := record(m)
	atRoot := &probedCtrl{name: "steady", healthy: true}
	m.Add(atRoot)
	gStart(t, m)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sick := &probedCtrl{name: "sick"}
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("late", cm.SupervisionSpec{HealthInterval: gDuration(20 * time.Millisecond), UnhealthyThreshold: 1}, sick)))
	gEventually(t, "late/sick failed", func() bool { return rec.gCount(cm.ChildFailed, "late/sick") >= 1 })
	assert.Zero(t, atRoot.asked.Load(), "the manager's controllers are probed at the manager's interval")
}

// firstErr is the Err of the first event of typ naming child, or nil.
func (r *recorder) firstErr(typ cm.EventType, child string) error {
	for _, e := range r.snapshot() {
		if e.Type == typ && e.Child == child {
			return e.Err
		}
	}
	return nil
}

// A stopped manager keeps every controller in /healthz, those in groups
// too. Before, once the manager stopped, GetHealth listed only the root's
// controllers: a user saw g/inner (and the groups' own lines) vanish from
// /healthz, and /healthz/controller/g/inner answer 404 instead of 500
// "manager stopped".
func TestAStoppedManagerKeepsGroupedControllersInHealthz(t *testing.T) {
	m := newManager(t, nil, gFast())
	m.Add(&probedCtrl{name: "top", healthy: true},
		cm.NewGroup("g", cm.SupervisionSpec{},
			&probedCtrl{name: "inner", healthy: true},
			cm.NewGroup("h", cm.SupervisionSpec{}, &probedCtrl{name: "deep", healthy: true})),
		&probedCtrl{name: "last", healthy: true})
	gStart(t, m)

	names := func() []string {
		var out []string
		for _, h := range m.GetHealth() {
			out = append(out, h.Name)
		}
		return out
	}
	running := names()
	require.Equal(t, []string{"top", "g/inner", "g/h/deep", "last", "g", "g/h"}, running)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m.ShutdownAndWait(ctx)

	stopped := m.GetHealth()
	require.Len(t, stopped, len(running), "after the stop: %v", stopped)
	for i, h := range stopped {
		assert.Equal(t, running[i], h.Name, "the stopped lines keep the running order and paths")
		assert.False(t, h.Healthy, h.Name)
		assert.Equal(t, "manager stopped", h.Message, h.Name)
	}

	srv := httptest.NewServer(health.NewHandler(m))
	defer srv.Close()
	for _, path := range []string{"/healthz/controller/g/inner", "/healthz/controller/g/h/deep", "/healthz/controller/g"} {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusInternalServerError, res.StatusCode, "%s: %s", path, body)
	}
}
