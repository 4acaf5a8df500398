package statespace

import (
	"errors"
	"fmt"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
)

// treeRunner is a runner over sc's tree that has run nothing: the tests
// below give it events, journal entries and steps by hand.
func treeRunner(t *testing.T, sc Scenario) *runner {
	t.Helper()
	r := newRunner(sc, Config{})
	t.Cleanup(r.pauses.Stop)
	stores, others := sc.rootChildren()
	r.order[""] = append(append([]string(nil), stores...), others...)
	for _, g := range sc.Groups {
		r.order[g.Path] = g.Children
		for _, c := range g.Children {
			if path := g.Path + "/" + c; !r.isGroup(path) {
				r.children[path] = newChild(path, kindOf(c), r.journal, r.release)
			}
		}
	}
	for _, name := range r.order[""] {
		if !r.isGroup(name) {
			r.children[name] = newChild(name, kindOf(name), r.journal, r.release)
		}
	}
	return r
}

func (r *runner) event(typ cm.EventType, child string, at time.Time, err error) {
	r.events = append(r.events, cm.Event{Type: typ, Child: child, Time: at, Err: err})
}

func invariantsOf(r *runner) map[Invariant][]string {
	out := map[Invariant][]string{}
	for _, v := range r.violations {
		out[v.Invariant] = append(out[v.Invariant], v.Child)
	}
	return out
}

// Each tree invariant fails on the events and calls that break it, and
// only on those.
func TestTreeInvariants(t *testing.T) {
	t0 := time.Now().Add(-time.Second) // the journal's entries come after
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	errFail := errors.New("fails")
	restForOne := Scenario{Strategy: cm.OneForOne, Controllers: 4, Groups: []Group{
		{Path: "g1", Strategy: cm.RestForOne, Children: []string{"ctrl-0", "ctrl-1", "ctrl-2"}},
		{Path: "g2", Children: []string{"ctrl-3"}},
	}}
	cases := []struct {
		name  string
		sc    Scenario
		setup func(r *runner)
		want  map[Invariant][]string
	}{{
		name: "RestForOne restarts the failed child and those after it",
		sc:   restForOne,
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1/ctrl-1", at(1), errFail)
			r.event(cm.ChildRestarted, "g1/ctrl-1", at(2), nil)
			r.event(cm.ChildRestarted, "g1/ctrl-2", at(3), nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "RestForOne never restarts one before the failed child, nor a sibling group's",
		sc:   restForOne,
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1/ctrl-1", at(1), errFail)
			r.event(cm.ChildRestarted, "g1/ctrl-0", at(2), nil)
			r.event(cm.ChildRestarted, "g2/ctrl-3", at(3), nil)
		},
		want: map[Invariant][]string{RestartUncaused: {"g1/ctrl-0", "g2/ctrl-3"}},
	}, {
		name: "one failure, one restart",
		sc:   restForOne,
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1/ctrl-2", at(1), errFail)
			r.event(cm.ChildRestarted, "g1/ctrl-2", at(2), nil)
			r.event(cm.ChildRestarted, "g1/ctrl-2", at(3), nil)
		},
		want: map[Invariant][]string{RestartUncaused: {"g1/ctrl-2"}},
	}, {
		name: "AllForOne at the root restarts a sibling group whole; RestartChild of a group restarts its children",
		sc: Scenario{Strategy: cm.AllForOne, Controllers: 3, Groups: []Group{
			{Path: "g1", Children: []string{"ctrl-0"}}, {Path: "g2", Children: []string{"g3"}}, {Path: "g2/g3", Children: []string{"ctrl-1"}},
		}},
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1", at(1), errFail)
			r.event(cm.ChildRestarted, "g2/g3/ctrl-1", at(2), nil)
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g2", at: at(3)})
			r.event(cm.ChildRestarted, "g2/g3/ctrl-1", at(4), nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "two RestartChild sent back to back restart it twice, one restart each",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g1/ctrl-0", at: at(1), answered: at(3)})
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g1/ctrl-0", at: at(1), answered: at(5)})
			r.event(cm.ChildRestarted, "g1/ctrl-0", at(2), nil)
			r.event(cm.ChildRestarted, "g1/ctrl-0", at(4), nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "one RestartChild explains one restart, not two",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g1/ctrl-0", at: at(1), answered: at(5)})
			r.event(cm.ChildRestarted, "g1/ctrl-0", at(2), nil)
			r.event(cm.ChildRestarted, "g1/ctrl-0", at(4), nil)
		},
		want: map[Invariant][]string{RestartUncaused: {"g1/ctrl-0"}},
	}, {
		name: "a group stopped by ExhaustedStop stays stopped until StartChild",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 2, Groups: []Group{
			{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-0", "ctrl-1"}},
		}},
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1", at(1), errFail)
			r.event(cm.ChildStopped, "g1", at(2), nil)
			r.journal.add("g1/ctrl-0", "controller", StartEnter, 1, nil)
			r.reqs = append(r.reqs, lifecycleReq{do: DoStartChild, path: "g1", at: r.journal.Of("g1/ctrl-0")[0].From})
			r.journal.add("g1/ctrl-1", "controller", StartEnter, 1, nil)
		},
		want: map[Invariant][]string{StoppedGroupRan: {"g1/ctrl-0"}},
	}, {
		name: "a StartChild sent while the group stops starts it after",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.event(cm.ChildFailed, "g1", at(1), errFail)
			r.reqs = append(r.reqs, lifecycleReq{do: DoStartChild, path: "g1", at: at(2)})
			r.event(cm.ChildStopped, "g1", at(3), nil)
			r.journal.add("g1/ctrl-0", "controller", StartEnter, 1, nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "a RestartChild sent before the budget was spent may be taken after the group stopped",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g1", at: at(0), answered: at(4)})
			r.event(cm.ChildFailed, "g1", at(1), errFail)
			r.event(cm.ChildStopped, "g1", at(2), nil)
			r.journal.add("g1/ctrl-0", "controller", StartEnter, 1, nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "a RestartChild sent before the budget was spent and cut short by the stop starts nothing",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.reqs = append(r.reqs, lifecycleReq{do: DoRestart, path: "g1", at: at(0), answered: at(4), err: fmt.Errorf("RestartChild: %w", cm.ErrStartInterrupted)})
			r.event(cm.ChildFailed, "g1", at(1), errFail)
			r.event(cm.ChildStopped, "g1", at(2), nil)
			r.journal.add("g1/ctrl-0", "controller", StartEnter, 1, nil)
		},
		want: map[Invariant][]string{StoppedGroupRan: {"g1/ctrl-0"}},
	}, {
		name: "StopChild of a Stop group is not its exhaustion",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 1, Groups: []Group{
			{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-0"}},
		}},
		setup: func(r *runner) {
			r.event(cm.ChildStopped, "g1", at(2), nil)
			r.journal.add("g1/ctrl-0", "controller", StartEnter, 1, nil)
		},
		want: map[Invariant][]string{},
	}, {
		name: "only the root escalates a spent budget, naming its own child",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 2, Groups: []Group{
			{Path: "g1", Children: []string{"ctrl-0"}}, {Path: "g2", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-1"}},
		}},
		setup: func(r *runner) {
			esc := func(child string, kind actors.Kind, err error) error {
				return &cm.EscalationError{Child: child, Kind: kind, Err: err}
			}
			r.event(cm.Escalated, "g1", at(1), esc("g1", actors.KindGroup, errFail))
			r.event(cm.Escalated, "g1/ctrl-0", at(2), esc("g1/ctrl-0", actors.KindController, errFail))
			r.event(cm.Escalated, "g2", at(3), esc("g2", actors.KindGroup, errFail))
			r.event(cm.Escalated, "ctrl-x", at(4), esc("ctrl-x", actors.KindGroup, errFail))
			r.event(cm.Escalated, "g1/ctrl-0", at(5), esc("g1/ctrl-0", actors.KindController,
				fmt.Errorf("controller %q: Shutdown did not return within 300ms during a restart", "g1/ctrl-0")))
		},
		want: map[Invariant][]string{EscalationWrong: {"g1/ctrl-0", "g2", "ctrl-x"}},
	}, {
		name: "a hung Shutdown escalates outside a Stop group only",
		sc: Scenario{Strategy: cm.OneForOne, Controllers: 2, Groups: []Group{
			{Path: "g1", Children: []string{"ctrl-0"}}, {Path: "g2", OnExhausted: cm.ExhaustedStop, Children: []string{"ctrl-1"}},
		}},
		setup: func(r *runner) {
			hung := func(child string) error {
				return &cm.EscalationError{Child: child, Kind: actors.KindController,
					Err: fmt.Errorf("controller %q: Shutdown did not return within 300ms during a restart", child)}
			}
			r.event(cm.Escalated, "g1/ctrl-0", at(1), hung("g1/ctrl-0"))
			r.event(cm.Escalated, "g2/ctrl-1", at(2), hung("g2/ctrl-1"))
		},
		want: map[Invariant][]string{EscalationWrong: {"g2/ctrl-1"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := treeRunner(t, tc.sc)
			tc.setup(r)
			r.checkTree()
			have := invariantsOf(r)
			if fmt.Sprint(have) != fmt.Sprint(tc.want) {
				t.Errorf("violations %v, want %v:\n%v", have, tc.want, r.violations)
			}
		})
	}
}

// A failure inside a group stopped by ExhaustedStop is resolved by the
// group's failure or stop, whatever the order of the events' times: an
// event stamped before the failure but delivered after the group's (the
// fleet's ClusterEngaged, stamped in engage) hid them from the scan,
// which stopped at the first earlier event (seed 1796559120450887302
// with -statespace.fleets, once under load). Without the group's stop,
// it is unresolved.
func TestFailureResolvedByEventsOutOfOrder(t *testing.T) {
	sc := Scenario{Strategy: cm.OneForOne, Webhooks: 1, Groups: []Group{
		{Path: "g1", OnExhausted: cm.ExhaustedStop, Children: []string{"hook-0"}},
	}}
	errFail := errors.New("fails")
	t0 := time.Now().Add(-time.Minute) // every bound long past
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name   string
		events []cm.Event
		want   bool // FailureUnresolved
	}{
		{"the group stops after the failure, in order", []cm.Event{
			{Type: cm.ChildFailed, Child: "g1/hook-0", Time: at(10), Err: errFail},
			{Type: cm.ChildFailed, Child: "g1", Time: at(11), Err: errFail},
			{Type: cm.ChildStopped, Child: "g1", Time: at(12)},
		}, false},
		{"the group stops after the failure, an earlier event delivered last", []cm.Event{
			{Type: cm.ChildFailed, Child: "g1/hook-0", Time: at(10), Err: errFail},
			{Type: cm.ChildFailed, Child: "g1", Time: at(11), Err: errFail},
			{Type: cm.ChildStopped, Child: "g1", Time: at(12)},
			{Type: cm.ClusterEngaged, Child: "fleet/c1", Time: at(9)},
		}, false},
		{"nothing after the failure but an earlier event", []cm.Event{
			{Type: cm.ChildFailed, Child: "g1/hook-0", Time: at(10), Err: errFail},
			{Type: cm.ClusterEngaged, Child: "fleet/c1", Time: at(9)},
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := treeRunner(t, sc)
			r.phase = cm.PhaseRunning
			for _, e := range tc.events {
				r.onEvent(e)
			}
			r.checkObligations(time.Now())
			if got := len(invariantsOf(r)[FailureUnresolved]) > 0; got != tc.want {
				t.Errorf("failure-unresolved %v, want %v: %v", got, tc.want, r.violations)
			}
		})
	}
}
