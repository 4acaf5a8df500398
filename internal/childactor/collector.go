package childactor

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"
)

// HealthCollector gathers the answers of one health sweep. It is a
// protoactor Process registered for the length of the sweep: one registry
// entry for the whole sweep instead of one future per child, which is what
// makes a sweep of thousands of children cheap.
//
// The sweep's owner creates it, has the supervisor Expect the entries and
// send the queries (HealthQuery with Collector set), then Dispatch, waits on
// Done (with a deadline of its own), then calls Close, which fills in the
// entries that did not answer. HealthSweep is that owner's part, deadline
// included.
//
// A child asked by a query carrying the collector writes its answer
// straight into its entry (each entry has an atomic state: no message and
// no lock per answer), and queues its health call on the sweep's run queue
// (healthRuns), whose few workers Dispatch starts. Answers sent as
// HealthAnswer messages to PID (a query with only ReplyTo set) land in the
// same entries.
type HealthCollector struct {
	system *actor.ActorSystem
	pid    *actor.PID

	mu       sync.Mutex // Expect and Close
	expected bool
	closed   bool

	entries atomic.Pointer[healthEntries] // set by Expect
	// shardsLeft counts the shards of entries with an entry pending.
	shardsLeft atomic.Int64
	done       chan struct{}

	runs healthRuns
}

// healthEntries are a sweep's entries, and the state of each. The entries
// are cut in shards of consecutive indexes, each counting its pending
// entries on a cache line of its own: the workers of a sweep answer
// different ranges (healthRuns' stripes) and share no counter but the count
// of shards left.
type healthEntries struct {
	statuses []actors.HealthStatus
	state    []atomic.Uint32
	shards   []pendingShard
}

// pendingShard counts the pending entries of one shard.
type pendingShard struct {
	pending atomic.Int64
	_       [128 - 8]byte
}

// healthShards is how many shards a sweep's entries are cut in, at most.
const healthShards = 16

// shard is the shard of entry i.
func (e *healthEntries) shard(i int) *pendingShard {
	return &e.shards[i*len(e.shards)/len(e.state)]
}

// The states of an entry. An entry goes from pending to writing (an answer
// took it) to final, or from pending to final (Close marked it silent);
// whoever takes it from pending writes its status, nobody else.
const (
	entryFinal   uint32 = iota // not asked, answered, or marked silent
	entryPending               // asked, not answered yet
	entryWriting               // an answer is being written
)

var _ actor.Process = (*HealthCollector)(nil)

// NewHealthCollector registers a collector in system.
func NewHealthCollector(system *actor.ActorSystem) *HealthCollector {
	c := &HealthCollector{system: system, done: make(chan struct{})}
	c.pid, _ = system.ProcessRegistry.Add(c, "health"+system.ProcessRegistry.NextId())
	return c
}

// PID is where HealthAnswer messages are sent.
func (c *HealthCollector) PID() *actor.PID { return c.pid }

// Expect sets the sweep's entries: statuses holds one entry per child in the
// order they are reported, and pending the indexes of those still to be
// answered by a HealthQuery; the others are final already. It is called
// once, before the queries are sent.
func (c *HealthCollector) Expect(statuses []actors.HealthStatus, pending []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expected || c.closed {
		return
	}
	c.expected = true
	e := &healthEntries{
		statuses: statuses,
		state:    make([]atomic.Uint32, len(statuses)),
		shards:   make([]pendingShard, min(healthShards, len(statuses))),
	}
	var shards int64
	for _, i := range pending {
		if e.state[i].Load() != entryPending {
			e.state[i].Store(entryPending)
			if e.shard(i).pending.Add(1) == 1 {
				shards++
			}
		}
	}
	c.runs.setup(len(statuses), len(pending))
	c.shardsLeft.Store(shards)
	c.entries.Store(e)
	if shards == 0 {
		close(c.done)
	}
}

// Dispatch starts the health calls the queries have queued on the sweep;
// the calls queued later start as they are queued. The sender of the
// queries calls it once they are sent (Close does too, so that no call
// stays queued).
func (c *HealthCollector) Dispatch() { c.runs.dispatch() }

// Done is closed once every pending entry has been answered.
func (c *HealthCollector) Done() <-chan struct{} { return c.done }

// answer writes the status of entry i, if it is still pending. The entry
// keeps the name it was given.
func (c *HealthCollector) answer(i int, status actors.HealthStatus) {
	e := c.entries.Load()
	if e == nil || i < 0 || i >= len(e.state) || !e.state[i].CompareAndSwap(entryPending, entryWriting) {
		return
	}
	status.Name = e.statuses[i].Name
	e.statuses[i] = status
	e.state[i].Store(entryFinal)
	if e.shard(i).pending.Add(-1) == 0 && c.shardsLeft.Add(-1) == 0 {
		close(c.done)
	}
}

// Close ends the sweep: it unregisters the collector (late answers become
// dead letters, or are ignored) and returns the entries, with unanswered
// ones marked unhealthy with the message silent. ok is false when Expect was
// never called (the supervisor did not take the request).
func (c *HealthCollector) Close(silent string) (statuses []actors.HealthStatus, ok bool) {
	c.system.ProcessRegistry.Remove(c.pid)
	c.mu.Lock()
	c.closed = true
	expected := c.expected
	c.mu.Unlock()
	c.runs.dispatch() // after Expect, which sets the run queue up, or instead of it
	e := c.entries.Load()
	if e == nil {
		return nil, expected
	}
	for i := range e.state {
		for {
			st := e.state[i].Load()
			if st == entryPending && e.state[i].CompareAndSwap(entryPending, entryFinal) {
				e.statuses[i].Healthy = false
				e.statuses[i].Message = silent
				break
			}
			if st == entryFinal {
				break
			}
			runtime.Gosched() // an answer is being written: a few instructions
		}
	}
	return e.statuses, expected
}

// SendUserMessage takes one HealthAnswer.
func (c *HealthCollector) SendUserMessage(_ *actor.PID, message interface{}) {
	if env, ok := message.(*actor.MessageEnvelope); ok {
		message = env.Message
	}
	if a, ok := message.(HealthAnswer); ok {
		c.answer(a.Index, a.Status)
	}
}

// SendSystemMessage ignores system messages: a collector watches nothing.
func (c *HealthCollector) SendSystemMessage(*actor.PID, interface{}) {}

// Stop unregisters the collector.
func (c *HealthCollector) Stop(*actor.PID) { c.system.ProcessRegistry.Remove(c.pid) }

// HealthSweep is one health sweep with a deadline: a HealthCollector, the
// queries sent to it, and a timer. It is the one way health is gathered: a
// manager's GetHealth and the supervisor's liveness probes each run one.
type HealthSweep struct {
	col      *HealthCollector
	timeout  time.Duration
	deadline clock.Timer
}

// StartHealthSweep registers a collector in system and calls send with it,
// which has the entries Expected and the queries sent (itself, or by asking
// the supervisor: GatherHealth); then it arms the sweep's deadline, timeout
// from now on clk.
func StartHealthSweep(system *actor.ActorSystem, clk clock.Clock, timeout time.Duration, send func(*HealthCollector)) *HealthSweep {
	col := NewHealthCollector(system)
	send(col)
	return &HealthSweep{col: col, timeout: timeout, deadline: clk.NewTimer(timeout)}
}

// Wait returns once every entry has been answered, the deadline has passed,
// or abort is closed (nil: never), whichever is first. Call it once, from
// any goroutine, before Close. The deadline timer stays armed until Close:
// whoever acts on the answers stops it, so a test on a fake clock that sees
// the timer gone knows the answers have been taken.
func (s *HealthSweep) Wait(abort <-chan struct{}) {
	select {
	case <-s.col.Done():
	case <-s.deadline.C():
	case <-abort:
	}
}

// Close ends the sweep, as HealthCollector.Close does: the entries still
// unanswered are unhealthy, with "no health answer within" the timeout.
func (s *HealthSweep) Close() (statuses []actors.HealthStatus, ok bool) {
	s.deadline.Stop()
	return s.col.Close(fmt.Sprintf("no health answer within %s", s.timeout))
}
