package statespace

import (
	"fmt"
	"testing"
	"time"
)

// later returns the first reading of the clock after t: the journal's
// entries and the answers' times are readings of it, and the judgment
// compares them strictly.
func later(t time.Time) time.Time {
	for {
		if now := time.Now(); now.After(t) {
			return now
		}
	}
}

// AnswerWrong fails on an answer its children's calls contradict, and only
// on those.
func TestAnswerInvariant(t *testing.T) {
	sc := Scenario{Controllers: 4, Groups: []Group{{Path: "g2", Children: []string{"ctrl-3"}}}}
	run := func(r *runner, path string, inc int) {
		r.journal.add(path, "controller", StartEnter, inc, nil)
		r.journal.add(path, "controller", StartExit, inc, nil)
	}
	stop := func(r *runner, path string, inc int) {
		r.journal.add(path, "controller", ShutdownEnter, inc, nil)
		r.journal.add(path, "controller", ShutdownExit, inc, nil)
	}
	// call records an answer to msg of path: sent before do, answered after.
	call := func(r *runner, msg, path string, do func()) {
		sent := later(time.Now())
		do()
		r.answers = append(r.answers, answer{msg: msg, path: path, sent: sent, answered: later(time.Now())})
	}
	cases := []struct {
		name  string
		setup func(r *runner)
		want  map[Invariant][]string
	}{{
		name: "StopChild answered once Shutdown returned",
		setup: func(r *runner) {
			run(r, "ctrl-0", 1)
			call(r, "StopChild", "ctrl-0", func() { stop(r, "ctrl-0", 1) })
		},
		want: map[Invariant][]string{},
	}, {
		name: "StopChild answered while Shutdown runs",
		setup: func(r *runner) {
			run(r, "ctrl-0", 1)
			call(r, "StopChild", "ctrl-0", func() { r.journal.add("ctrl-0", "controller", ShutdownEnter, 1, nil) })
			r.journal.add("ctrl-0", "controller", ShutdownExit, 1, nil)
		},
		want: map[Invariant][]string{AnswerWrong: {"ctrl-0"}},
	}, {
		name: "RemoveChild of a group answered before its child stopped",
		setup: func(r *runner) {
			run(r, "g2/ctrl-3", 1)
			call(r, "RemoveChild", "g2", func() {})
		},
		want: map[Invariant][]string{AnswerWrong: {"g2"}},
	}, {
		name: "StopChild of a child that started after it was sent",
		setup: func(r *runner) {
			call(r, "StopChild", "ctrl-1", func() { run(r, "ctrl-1", 1) })
		},
		want: map[Invariant][]string{},
	}, {
		name: "RestartChild answered once the new start returned",
		setup: func(r *runner) {
			run(r, "ctrl-2", 1)
			call(r, "RestartChild", "ctrl-2", func() { stop(r, "ctrl-2", 1); run(r, "ctrl-2", 2) })
		},
		want: map[Invariant][]string{},
	}, {
		name: "RestartChild answered with no new start",
		setup: func(r *runner) {
			run(r, "ctrl-2", 1)
			call(r, "RestartChild", "ctrl-2", func() {})
		},
		want: map[Invariant][]string{AnswerWrong: {"ctrl-2"}},
	}, {
		name: "StartChild answered before its start returned",
		setup: func(r *runner) {
			call(r, "StartChild", "ctrl-1", func() { r.journal.add("ctrl-1", "controller", StartEnter, 1, nil) })
			r.journal.add("ctrl-1", "controller", StartExit, 1, nil)
		},
		want: map[Invariant][]string{AnswerWrong: {"ctrl-1"}},
	}, {
		name: "a group's RestartChild is not judged",
		setup: func(r *runner) {
			call(r, "RestartChild", "g2", func() {})
		},
		want: map[Invariant][]string{},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := treeRunner(t, sc)
			tc.setup(r)
			r.checkAnswers()
			have := invariantsOf(r)
			if fmt.Sprint(have) != fmt.Sprint(tc.want) {
				t.Errorf("violations %v, want %v:\n%v", have, tc.want, r.violations)
			}
			if len(r.answers) != 0 {
				t.Errorf("%d answers left unjudged", len(r.answers))
			}
		})
	}
}
