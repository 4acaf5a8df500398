package liveview

import (
	"fmt"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/supervisor"
)

func TestHistoryBounds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	h := newEventHistory(10*time.Minute, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// Failures of "old" 20 and 5 minutes back, of "new" within the window,
	// and 300 events in all: the ring keeps the newest 200, oldest first.
	h.record(supervisor.Event{Type: supervisor.ChildFailed, Child: "old", Time: at(0)})
	h.record(supervisor.Event{Type: supervisor.ChildFailed, Child: "old", Time: at(15 * time.Minute)})
	for i := range 298 {
		h.record(supervisor.Event{Type: supervisor.ChildFailed, Child: "new", Time: at(19*time.Minute + time.Duration(i)*time.Millisecond), Restarts: i})
	}
	rec := h.snapshot(at(20 * time.Minute))
	if have := rec.failures["old"]; len(have) != 1 || !have[0].Equal(at(15*time.Minute)) {
		t.Errorf("old: want the failure of 5 minutes ago alone, have %v", have)
	}
	if have := len(rec.failures["new"]); have != 298 {
		t.Errorf("new: want 298 failures, have %d", have)
	}
	if len(rec.events) != recentEventsKept || rec.events[0].Restarts != 98 || rec.events[len(rec.events)-1].Restarts != 297 {
		t.Errorf("events: want the newest %d, oldest first (restarts 98..297), have %d from %d to %d",
			recentEventsKept, len(rec.events), rec.events[0].Restarts, rec.events[len(rec.events)-1].Restarts)
	}

	// A child's failures are capped, removal forgets them, and a snapshot
	// is a copy.
	for i := range failuresKeptPerChild + 50 {
		h.record(supervisor.Event{Type: supervisor.ChildFailed, Child: "loop", Time: at(20*time.Minute + time.Duration(i))})
	}
	h.record(supervisor.Event{Type: supervisor.ChildRemoved, Child: "old", Time: at(20 * time.Minute)})
	rec = h.snapshot(at(20 * time.Minute))
	if have := len(rec.failures["loop"]); have != failuresKeptPerChild {
		t.Errorf("loop: want %d failures kept, have %d", failuresKeptPerChild, have)
	}
	if _, ok := rec.failures["old"]; ok {
		t.Errorf("old: want forgotten after ChildRemoved")
	}
	rec.failures["loop"][0] = time.Time{}
	if again := h.snapshot(at(20 * time.Minute)); again.failures["loop"][0].IsZero() {
		t.Errorf("a snapshot shares its slices with the history")
	}

	// Leadership.
	h.record(supervisor.Event{Type: supervisor.LeaderElected, Time: at(21 * time.Minute)})
	if have := h.snapshot(at(22 * time.Minute)).leaderSince; !have.Equal(at(21 * time.Minute)) {
		t.Errorf("leaderSince: want the election's time, have %v", have)
	}
	h.record(supervisor.Event{Type: supervisor.LeaderLost, Time: at(23 * time.Minute), Err: fmt.Errorf("lease lost")})
	if have := h.snapshot(at(24 * time.Minute)).leaderSince; !have.IsZero() {
		t.Errorf("leaderSince after LeaderLost: want zero, have %v", have)
	}
}
