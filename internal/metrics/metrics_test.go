package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

func source(status func(context.Context) (supervisor.Status, error)) Source {
	return Source{
		Status: status, Observed: supervise.NewObserved(), HealthTimeout: time.Second,
		Lease: "lease", Identity: "a", Shards: 1, Logger: slog.New(slog.DiscardHandler),
	}
}

// A panic is counted once per child, however many events carry it.
func TestPanicsCountedOncePerPanic(t *testing.T) {
	status := supervisor.Status{Phase: supervisor.PhaseRunning, Leader: true, Identity: "a", Children: []supervisor.ChildStatus{
		{Name: "jobs", Kind: actors.KindController, Healthy: true, Restarts: 2, Failures: 2},
		{Name: "cron", Kind: actors.KindController, Healthy: true},
	}}
	mm := New(source(func(context.Context) (supervisor.Status, error) { return status, nil }))
	first := &actors.PanicError{Child: "jobs", Kind: actors.KindController, Op: "GetHealth", Value: "boom"}
	second := &actors.PanicError{Child: "jobs", Kind: actors.KindController, Op: "Run", Value: "boom"}
	for _, e := range []supervisor.Event{
		{Type: supervisor.ChildUnhealthy, Child: "jobs", Err: first},
		{Type: supervisor.ChildFailed, Child: "jobs", Err: fmt.Errorf("unhealthy: %w", first)}, // the same panic
		{Type: supervisor.ChildFailed, Child: "jobs", Err: second},
		{Type: supervisor.ChildFailed, Child: "cron", Err: errors.New("not a panic")},
	} {
		mm.ObserveEvent(e)
	}
	want := `
# HELP controllermanager_child_panics_total Panics recovered in a child's user calls (Run, Recover, Start, Shutdown, GetHealth, Ready, Handle).
# TYPE controllermanager_child_panics_total counter
controllermanager_child_panics_total{child="cron",kind="controller"} 0
controllermanager_child_panics_total{child="jobs",kind="controller"} 2
# HELP controllermanager_leader Whether this replica holds the leader-election lease (1) or not (0). Present only with leader election on.
# TYPE controllermanager_leader gauge
controllermanager_leader{identity="a",lease="lease"} 1
`
	if err := testutil.GatherAndCompare(mm.Registry, strings.NewReader(want), "controllermanager_child_panics_total", "controllermanager_leader"); err != nil {
		t.Error(err)
	}
	mm.ObserveEvent(supervisor.Event{Type: supervisor.ChildRemoved, Child: "jobs"})
	if have := mm.panicCounts(); len(have) != 0 {
		t.Errorf("a removed child's panics are kept: %v", have)
	}
}

// A supervisor that does not answer leaves the children out of the scrape,
// and the phase comes from what the facade observed.
func TestScrapeOfAStuckSupervisor(t *testing.T) {
	mm := New(source(func(ctx context.Context) (supervisor.Status, error) {
		return supervisor.Status{}, context.DeadlineExceeded
	}))
	want := `
# HELP controllermanager_phase The manager's phase: 1 for the phase it is in, 0 for every other.
# TYPE controllermanager_phase gauge
`
	for _, p := range supervisor.Phases() {
		v := 0
		if p == supervisor.PhaseIdle {
			v = 1
		}
		want += fmt.Sprintf("controllermanager_phase{phase=%q} %d\n", p, v)
	}
	if err := testutil.GatherAndCompare(mm.Registry, strings.NewReader(want), "controllermanager_phase", "controllermanager_child_healthy"); err != nil {
		t.Error(err)
	}
}

// A group's children have their series by path, and a group stopped on
// its spent budget says so.
func TestGroupChildrenHaveSeriesByPath(t *testing.T) {
	status := supervisor.Status{Phase: supervisor.PhaseRunning, Children: []supervisor.ChildStatus{
		{Name: "tenant-a", Kind: actors.KindGroup, Failures: 1, Group: &supervisor.GroupStatus{Exhausted: true},
			Children: []supervisor.ChildStatus{
				{Name: "tenant-a/store", Kind: actors.KindStore, Restarts: 3, Failures: 4},
				{Name: "tenant-a/inner", Kind: actors.KindGroup, Group: &supervisor.GroupStatus{}, Children: []supervisor.ChildStatus{
					{Name: "tenant-a/inner/ctrl", Kind: actors.KindController, Healthy: true, Restarts: 1},
				}},
			}},
	}}
	mm := New(source(func(context.Context) (supervisor.Status, error) { return status, nil }))
	want := `
# HELP controllermanager_child_restarts_total Times a child's start call ran after its first: after a failure, a RestartChild or a StartChild.
# TYPE controllermanager_child_restarts_total counter
controllermanager_child_restarts_total{child="tenant-a",kind="group"} 0
controllermanager_child_restarts_total{child="tenant-a/inner",kind="group"} 0
controllermanager_child_restarts_total{child="tenant-a/inner/ctrl",kind="controller"} 1
controllermanager_child_restarts_total{child="tenant-a/store",kind="store"} 3
# HELP controllermanager_group_exhausted Whether a group is stopped because a child of it spent the group's restart budget (OnExhausted Stop) (1) or not (0).
# TYPE controllermanager_group_exhausted gauge
controllermanager_group_exhausted{child="tenant-a"} 1
controllermanager_group_exhausted{child="tenant-a/inner"} 0
`
	if err := testutil.GatherAndCompare(mm.Registry, strings.NewReader(want), "controllermanager_child_restarts_total", "controllermanager_group_exhausted"); err != nil {
		t.Error(err)
	}
}
