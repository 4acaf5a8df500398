package liveview

import (
	"sync"
	"time"

	"github.com/actorkube/controllermanager/supervisor"
)

// The bounds of a eventHistory: what it keeps costs at most this much,
// however long the manager runs and however often its children fail.
const (
	recentEventsKept     = 200 // the newest events, for the page's log
	failuresKeptPerChild = 500 // within the window; a crash loop escalates long before
)

// eventHistory is what a View remembers of the event stream, from
// one subscription of its own: each child's recent failure times (a Status
// has only counts), the newest events, and when this replica last became
// leader. Its record function is the subscriber: it takes a lock held only
// for appends and copies, and never blocks otherwise.
type eventHistory struct {
	window time.Duration

	mu          sync.Mutex
	since       time.Time // when recording began
	failures    map[string][]time.Time
	events      []Event // a ring: next is where the next one goes once full
	next        int
	leaderSince time.Time // the last LeaderElected, zero if none or lost since
}

func newEventHistory(window time.Duration, now time.Time) *eventHistory {
	return &eventHistory{window: window, since: now, failures: map[string][]time.Time{}}
}

// record is the history's subscriber.
func (h *eventHistory) record(e supervisor.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Type {
	case supervisor.ChildFailed:
		times := h.prune(h.failures[e.Child], e.Time)
		if len(times) >= failuresKeptPerChild {
			times = times[1:]
		}
		h.failures[e.Child] = append(times, e.Time)
	case supervisor.ChildRemoved:
		delete(h.failures, e.Child)
	case supervisor.LeaderElected:
		h.leaderSince = e.Time
	case supervisor.LeaderLost:
		h.leaderSince = time.Time{}
	}
	ev := newEvent(e)
	if len(h.events) < recentEventsKept {
		h.events = append(h.events, ev)
		return
	}
	h.events[h.next] = ev
	h.next = (h.next + 1) % recentEventsKept
}

// prune drops the times older than the window before now.
func (h *eventHistory) prune(times []time.Time, now time.Time) []time.Time {
	cut := now.Add(-h.window)
	i := 0
	for i < len(times) && times[i].Before(cut) {
		i++
	}
	return times[i:]
}

// historyRecord is a copy of the history at one moment.
type historyRecord struct {
	since       time.Time
	failures    map[string][]time.Time // within the window before now
	events      []Event                // oldest first
	leaderSince time.Time
}

func (h *eventHistory) snapshot(now time.Time) historyRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := historyRecord{since: h.since, failures: make(map[string][]time.Time, len(h.failures)), leaderSince: h.leaderSince}
	for name, times := range h.failures {
		if kept := h.prune(times, now); len(kept) > 0 {
			rec.failures[name] = append([]time.Time(nil), kept...)
		}
	}
	rec.events = make([]Event, 0, len(h.events))
	rec.events = append(rec.events, h.events[h.next:]...)
	rec.events = append(rec.events, h.events[:h.next]...)
	return rec
}
