package controllermanager

import (
	"sync"
	"time"

	"github.com/actorkube/controllermanager/internal/kubeevents"
)

// observe subscribes the manager's own bookkeeping to its events: the
// panics metric and the Kubernetes Events. It runs on a subscriber's
// goroutine of its own (Subscribe), so it never stalls supervision; once the
// manager has stopped it flushes the Events. Called by start, once.
func (m *BaseManager) observe() {
	m.events.start()
	var seen chan struct{} // closed once flushed: ShutdownAndWait waits for it
	if m.events.flushes() {
		seen = make(chan struct{})
		m.mu.Lock()
		m.flushed = seen
		m.mu.Unlock()
	}
	var once sync.Once
	finish := func() {
		once.Do(func() {
			m.events.stop()
			if seen != nil {
				close(seen)
			}
		})
	}
	cancel := m.Subscribe(func(e Event) {
		m.metrics.ObserveEvent(e)
		m.events.record(e)
		if e.Type == PhaseChanged && e.Phase.Ended() {
			finish()
		}
	})
	if !m.events.flushes() {
		return
	}
	// Should the terminal event never come to this subscriber (the manager
	// stopped before it subscribed), the recorder is shut down all the same.
	go func() {
		<-m.handle.Observed.Terminated()
		timer := time.NewTimer(kubeevents.FlushTimeout)
		defer timer.Stop()
		select {
		case <-seen:
		case <-timer.C:
			cancel()
			finish()
		}
	}()
}
