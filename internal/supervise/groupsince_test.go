package supervise

import (
	"testing"
	"time"

	"github.com/actorkube/controllermanager/supervisor"
)

// TestGroupSinceWhenNoChildChanged: a group's state also moves with no
// child's record changing, when its lease or shard is won (a Pending child
// counts only while its lease is held). Its Since must not then be before
// the Status that read the old state. Found by TestStateSpace (seed
// 1796312247000820582, since-wrong): a group of a running webhook and a
// Pending store read Running before its shards were won and Starting after,
// Since the webhook's start, 45ms before the Status that had said Running.
func TestGroupSinceWhenNoChildChanged(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC)
	hook := &childRecord{state: supervisor.StateRunning, since: t0}
	store := &childRecord{state: supervisor.StatePending, since: t0.Add(-time.Second)}
	g := &childRecord{since: t0.Add(-time.Second), sub: &level{children: []*childRecord{hook, store}}}
	g.sub.group = g
	groupSince := func(g *childRecord, state supervisor.ChildState, now time.Time) time.Time {
		return g.sub.since(state, now)
	}

	read := t0.Add(45 * time.Millisecond)
	if got := groupSince(g, supervisor.StateRunning, read); !got.Equal(t0) {
		t.Fatalf("Running since %s, want the webhook's start %s", got, t0)
	}
	// The same state read again: Since stays.
	if got := groupSince(g, supervisor.StateRunning, read.Add(time.Millisecond)); !got.Equal(t0) {
		t.Fatalf("Running read again: since %s, want %s", got, t0)
	}
	// The lease is won: no record changed, the group now reads Starting.
	now := read.Add(10 * time.Millisecond)
	got := groupSince(g, supervisor.StateStarting, now)
	if got.Before(read.Add(time.Millisecond)) {
		t.Fatalf("Starting since %s, before the Status at %s that read Running", got, read.Add(time.Millisecond))
	}
	if got.After(now) {
		t.Fatalf("Starting since %s, after the Status reading it at %s", got, now)
	}
	// A child's later change still moves Since on the next change of state.
	store.state, store.since = supervisor.StateRunning, now.Add(5*time.Millisecond)
	if got := groupSince(g, supervisor.StateRunning, now.Add(20*time.Millisecond)); !got.Equal(store.since) {
		t.Fatalf("Running again since %s, want the store's start %s", got, store.since)
	}
}
