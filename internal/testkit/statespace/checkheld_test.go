package statespace

import (
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// running-unheld fails on a manager that stays Running holding nothing
// past its bound, and only then.
func TestRunningUnheldInvariant(t *testing.T) {
	running := cm.Status{Phase: supervisor.PhaseRunning}
	leading := cm.Status{Phase: supervisor.PhaseRunning, Leader: true}
	electing := cm.Status{Phase: supervisor.PhaseElecting}
	cases := []struct {
		name     string
		election string
		seen     []cm.Status // one Status a second
		want     bool
	}{
		{"Running and leading", Reelect, []cm.Status{leading, leading, leading, leading, leading}, false},
		{"Running, holding nothing, for good", Reelect, []cm.Status{running, running, running, running, running}, true},
		{"holding nothing, then Electing", Reelect, []cm.Status{running, electing, electing, electing, electing}, false},
		{"holding nothing, then leading again", Exit, []cm.Status{running, leading, leading, leading, leading}, false},
		{"election off", ElectionOff, []cm.Status{running, running, running, running, running}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(Scenario{Election: tc.election}, Config{Slack: time.Second})
			defer r.pauses.Stop()
			at := time.Now()
			for _, st := range tc.seen {
				r.checkHeld(st, at)
				r.checkObligations(at)
				at = at.Add(time.Second) // past FenceTimeout + ShutdownTimeout + 1s by the fourth
			}
			got := false
			for _, v := range r.violations {
				got = got || v.Invariant == RunningUnheld
			}
			if got != tc.want {
				t.Errorf("running-unheld broken: %v, want %v (%v)", got, tc.want, r.violations)
			}
		})
	}
}
