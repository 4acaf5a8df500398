package ctrlruntime

import (
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
)

// fakeRegistration is a handler registration whose sync is a channel.
type fakeRegistration struct{ synced chan struct{} }

func (r fakeRegistration) HasSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

func (r fakeRegistration) HasSyncedChecker() toolscache.DoneChecker { return doneChecker(r.synced) }

type doneChecker chan struct{}

func (d doneChecker) Name() string          { return "fake" }
func (d doneChecker) Done() <-chan struct{} { return d }

// HasSynced answers once the handler has synced, not at a poll tick, and
// false once the incarnation has shut down first: toolscache's
// WaitForCacheSync, which polls every 100 ms, then returns at its first
// call.
func TestNotifiedRegistrationWaitsForTheNotification(t *testing.T) {
	synced, stopped := make(chan struct{}), make(chan struct{})
	reg := notifiedRegistration{fakeRegistration{synced}, stopped}
	answer := make(chan bool, 1)
	go func() { answer <- toolscache.WaitForCacheSync(make(chan struct{}), reg.HasSynced) }()
	select {
	case <-answer:
		t.Fatal("HasSynced answered before the handler synced")
	default:
	}
	closedAt := time.Now()
	close(synced)
	if !<-answer {
		t.Fatal("WaitForCacheSync returned false")
	}
	// A poll would have waited out its 100 ms period.
	if took := time.Since(closedAt); took >= 100*time.Millisecond {
		t.Errorf("WaitForCacheSync took %v after the notification: a poll period", took)
	}

	unsynced := notifiedRegistration{fakeRegistration{make(chan struct{})}, stopped}
	close(stopped)
	if unsynced.HasSynced() {
		t.Error("HasSynced after shutdown, of a handler that never synced, is true")
	}
}
