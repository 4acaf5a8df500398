package supervise

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/supervisor"
)

// DefaultEventBuffer is how many undelivered events a subscriber may fall
// behind before the oldest are dropped (internal/defaults.EventBuffer).
const DefaultEventBuffer = defaults.EventBuffer

// Facade plumbing: Bus delivers events to subscribers (a manager's
// Subscribe is built on it). Publish never blocks on a subscriber:
// each subscriber has a queue of its own, drained by a goroutine of its own,
// in order. A subscriber that falls more than the buffer behind loses the
// oldest events it has not received, and is told so by an EventsDropped event
// before the events that follow; a subscriber that panics is logged and keeps
// receiving.
type Bus struct {
	buffer int
	logger *slog.Logger

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

// Facade plumbing: NewBus returns a Bus whose subscribers each buffer up to buffer events
// (DefaultEventBuffer when buffer <= 0).
func NewBus(buffer int, logger *slog.Logger) *Bus {
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Bus{buffer: buffer, logger: logger, subs: map[*subscriber]struct{}{}}
}

type subscriber struct {
	fn     func(supervisor.Event)
	bus    *Bus
	wake   chan struct{}
	exited chan struct{}

	mu       sync.Mutex
	queue    []supervisor.Event
	dropped  int
	draining bool // deliver what is queued, then exit
	cancel   bool // exit now
}

// Subscribe registers fn for every event published from now on. cancel stops
// the deliveries (fn may still be running once); it is safe to call from fn
// and more than once. After Close, Subscribe registers nothing.
func (b *Bus) Subscribe(fn func(supervisor.Event)) (cancel func()) {
	s := &subscriber{fn: fn, bus: b, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		close(s.exited)
		return func() {}
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go s.deliver()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, s)
			b.mu.Unlock()
			s.mu.Lock()
			s.cancel = true
			s.mu.Unlock()
			s.signal()
		})
	}
}

// Publish queues e for every subscriber. It never blocks on one.
func (b *Bus) Publish(e supervisor.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.push(e)
	}
}

// Close ends the bus: subscribers receive what is queued for them, then
// their goroutines exit. Close does not wait; Drained does.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		s.mu.Lock()
		s.draining = true
		s.mu.Unlock()
		s.signal()
	}
}

// Drained returns a channel closed once every subscriber's goroutine has
// exited after Close (a subscriber whose fn never returns never exits).
func (b *Bus) Drained() <-chan struct{} {
	b.mu.Lock()
	subs := make([]*subscriber, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for _, s := range subs {
			<-s.exited
		}
		close(done)
	}()
	return done
}

func (s *subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) push(e supervisor.Event) {
	s.mu.Lock()
	if len(s.queue) >= s.bus.buffer {
		s.queue = s.queue[1:]
		s.dropped++
	}
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	s.signal()
}

func (s *subscriber) deliver() {
	defer close(s.exited)
	for {
		s.mu.Lock()
		if s.cancel {
			s.mu.Unlock()
			return
		}
		batch, dropped := s.queue, s.dropped
		s.queue, s.dropped = nil, 0
		draining := s.draining
		s.mu.Unlock()

		if dropped > 0 {
			first := supervisor.Event{Time: time.Now()}
			if len(batch) > 0 {
				first = batch[0]
			}
			s.call(supervisor.Event{Type: supervisor.EventsDropped, Time: first.Time, Phase: first.Phase, Restarts: dropped,
				Err: fmt.Errorf("supervisor: %d events dropped: this subscriber fell more than %d events behind", dropped, s.bus.buffer)})
		}
		for _, e := range batch {
			if s.cancelled() {
				return
			}
			s.call(e)
		}
		if len(batch) == 0 && dropped == 0 {
			if draining {
				return
			}
			<-s.wake
		}
	}
}

func (s *subscriber) cancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancel
}

func (s *subscriber) call(e supervisor.Event) {
	defer func() {
		if r := recover(); r != nil {
			s.bus.logger.Error("event subscriber panicked", "event", e.Type, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	s.fn(e)
}
