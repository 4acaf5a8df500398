package statespace

import (
	"errors"
	"fmt"
	"testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// unelected finds a Status short of Running with every shard held, and
// only such a Status.
func TestUnelected(t *testing.T) {
	held := func(h ...bool) []supervisor.ShardStatus {
		out := make([]supervisor.ShardStatus, len(h))
		for i, b := range h {
			out[i] = supervisor.ShardStatus{Index: i, Held: b}
		}
		return out
	}
	cases := []struct {
		name   string
		shards int
		st     cm.Status
		short  bool
	}{
		{"single lease, Running, leader", 1, cm.Status{Phase: cm.PhaseRunning, Leader: true}, false},
		{"single lease, Running, not leader", 1, cm.Status{Phase: cm.PhaseRunning}, true},
		{"single lease, Electing", 1, cm.Status{Phase: cm.PhaseElecting}, true},
		{"shards, every one held", 3, cm.Status{Phase: cm.PhaseRunning, Leader: true, Shards: held(true, true, true)}, false},
		{"shards, one missing", 3, cm.Status{Phase: cm.PhaseRunning, Leader: true, Shards: held(true, false, true)}, true},
		{"shards, fewer reported", 3, cm.Status{Phase: cm.PhaseRunning, Leader: true, Shards: held(true, true)}, true},
		{"shards, Recovering", 2, cm.Status{Phase: cm.PhaseRecovering, Leader: true, Shards: held(true, true)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(Scenario{Shards: tc.shards}, Config{})
			t.Cleanup(r.pauses.Stop)
			why := r.unelected(tc.st)
			if (why != "") != tc.short {
				t.Errorf("unelected = %q, want short %v", why, tc.short)
			}
		})
	}
}

// endsReelect allows a Reelect manager that stopped by itself only the ends
// Reelect allows: an escalation, or a fencing that did not complete.
func TestEndsReelect(t *testing.T) {
	cases := []struct {
		name    string
		err     error
		allowed bool
	}{
		{"an escalation", fmt.Errorf("manager: %w", &cm.EscalationError{Child: "c", Err: errors.New("spent")}), true},
		{"a fencing that did not complete", fmt.Errorf(`shard 0 (Lease l): %w; not fenced: controller "c" did not return from Shutdown within 720ms`, cm.ErrLeaseLost), true},
		{"a failed start after a re-election", errors.New(`cannot start controllers: controller "g/a": panic in Run`), false},
		{"no error", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := endsReelect(tc.err); got != tc.allowed {
				t.Errorf("endsReelect(%v) = %v, want %v", tc.err, got, tc.allowed)
			}
		})
	}
}
