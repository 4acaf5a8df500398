package statespace

import (
	"errors"
	"testing"
	"time"
)

// handle-outside and handle-beside-shutdown, on hand-made histories: a
// Handle begins only while an incarnation serves, and a Shutdown begins
// only once the Handle calls younger than the drain's bound have returned.
func TestHandleInvariants(t *testing.T) {
	const hook = "hook"
	start := func(j *Journal, inc int, err error) {
		j.add(hook, "webhook", StartEnter, inc, nil)
		j.add(hook, "webhook", StartExit, inc, err)
	}
	shutdown := func(j *Journal, inc int) {
		j.add(hook, "webhook", ShutdownEnter, inc, nil)
		j.add(hook, "webhook", ShutdownExit, inc, nil)
	}
	handled := func(j *Journal) { j.handleExit(hook, j.handleEnter(hook, "webhook")) }
	cases := []struct {
		name    string
		history func(j *Journal)
		want    Invariant // "" for none
	}{
		{"before the first Start", handled, HandleOutside},
		{"while Start runs", func(j *Journal) {
			j.add(hook, "webhook", StartEnter, 1, nil)
			handled(j)
		}, HandleOutside},
		{"after a failed Start", func(j *Journal) {
			start(j, 1, errors.New("cannot listen"))
			handled(j)
		}, HandleOutside},
		{"after Shutdown began", func(j *Journal) {
			start(j, 1, nil)
			j.add(hook, "webhook", ShutdownEnter, 1, nil)
			handled(j)
		}, HandleOutside},
		{"served, then stopped, then served again", func(j *Journal) {
			start(j, 1, nil)
			handled(j)
			shutdown(j, 1)
			start(j, 2, nil)
			handled(j)
		}, ""},
		{"Shutdown beside a young Handle", func(j *Journal) {
			start(j, 1, nil)
			j.handleEnter(hook, "webhook")
			shutdown(j, 1)
		}, HandleBesideShutdown},
		{"Shutdown beside a Handle past the drain's bound", func(j *Journal) {
			start(j, 1, nil)
			id := j.handleEnter(hook, "webhook")
			j.handles[hook][id] = time.Now().Add(-HandleDrain - time.Millisecond)
			shutdown(j, 1)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []Violation
			j := NewJournal(func(v Violation) { got = append(got, v) })
			tc.history(j)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("want none, have %v", got)
			case tc.want != "" && (len(got) != 1 || got[0].Invariant != tc.want):
				t.Fatalf("want one %s, have %v", tc.want, got)
			}
		})
	}
}
