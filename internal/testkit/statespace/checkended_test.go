package statespace

import (
	"errors"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
)

// not-ended gives a manager's end the slow fake's allowance for its Lease
// releases when a SlowAPI step comes after the end began (the releases
// come after the children's stops, behind the calls the fake holds), and
// only the allowance of that latency.
func TestNotEndedAllowsASlowAPITakenDuringTheEnd(t *testing.T) {
	// The bound: ShutdownTimeout 300ms + the slack 1s; with 4 shards and a
	// 300ms latency the allowance is 2·(4+1)·300ms = 3s more.
	const latency = 300 * time.Millisecond
	cases := []struct {
		name   string
		slowAt time.Duration // after the escalation; < 0: no SlowAPI step
		ended  time.Duration // Done closes this long after the escalation; 0: never
		want   bool
	}{
		{"ended within the bound, no slow API", -1, time.Second, false},
		{"not ended, no slow API", -1, 0, true},
		{"ended past the bound, no slow API", -1, 2 * time.Second, true},
		{"slow API 1ms into the end, ended within its allowance", time.Millisecond, 4 * time.Second, false},
		{"slow API 1ms into the end, ended past its allowance", time.Millisecond, 5 * time.Second, true},
		{"slow API 2s into the end, counted from the step", 2 * time.Second, 5500 * time.Millisecond, false},
		{"slow API 2s into the end, ended past it", 2 * time.Second, 6500 * time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(Scenario{Shards: 4, Election: Reelect}, Config{Slack: time.Second})
			defer r.pauses.Stop()
			at := time.Now()
			r.onEvent(cm.Event{Type: cm.Escalated, Time: at, Err: errors.New("budget spent")})
			if tc.slowAt >= 0 {
				r.latency.Store(int64(latency))
				r.slowedEnds(at.Add(tc.slowAt))
			}
			for now := at; now.Before(at.Add(10 * time.Second)); now = now.Add(100 * time.Millisecond) {
				if tc.ended > 0 && !now.Before(at.Add(tc.ended)) {
					r.mu.Lock()
					r.doneAt = now
					r.mu.Unlock()
				}
				r.checkObligations(now)
			}
			got := false
			for _, v := range r.violations {
				got = got || v.Invariant == NotEnded
			}
			if got != tc.want {
				t.Errorf("not-ended broken: %v, want %v (%v)", got, tc.want, r.violations)
			}
		})
	}
}
