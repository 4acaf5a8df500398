// Package pausewatch measures the longest pause of the whole test process:
// a 10 ms ticker that did not tick on time. A pause of the process (a loaded
// machine, a stop-the-world) stops a lease holder and delays its peers
// alike, which no lease can fence; tests use it to tell such a pause from a
// fault of the code under test.
package pausewatch

import (
	"sync"
	"time"
)

// period is how often the watch expects to run.
const period = 10 * time.Millisecond

// Watch measures pauses from Start until Stop.
type Watch struct {
	mu      sync.Mutex
	longest time.Duration
	done    chan struct{}
	exited  chan struct{}
}

// Start starts a watch; Stop ends it.
func Start() *Watch {
	w := &Watch{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		tick := time.NewTicker(period)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case now := <-tick.C:
				w.mu.Lock()
				w.longest = max(w.longest, now.Sub(last)-period)
				w.mu.Unlock()
				last = now
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// Longest is the longest pause seen so far.
func (w *Watch) Longest() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest
}

// Stop ends the watch and waits for its goroutine.
func (w *Watch) Stop() { close(w.done); <-w.exited }
