package childactor

import (
	"fmt"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"
)

// HealthCollector gathers the HealthAnswers of one health sweep. It is a
// protoactor Process registered for the length of the sweep: one registry
// entry for the whole sweep instead of one future per child, which is what
// makes a sweep of thousands of children cheap.
//
// The sweep's owner creates it, has the supervisor Expect the entries and send
// the queries, waits on Done (with a deadline of its own), then calls Close,
// which fills in the entries that did not answer. HealthSweep is that
// owner's part, deadline included.
type HealthCollector struct {
	system *actor.ActorSystem
	pid    *actor.PID

	mu        sync.Mutex
	statuses  []actors.HealthStatus
	pending   []bool
	remaining int
	expected  bool
	closed    bool
	done      chan struct{}
}

var _ actor.Process = (*HealthCollector)(nil)

// NewHealthCollector registers a collector in system.
func NewHealthCollector(system *actor.ActorSystem) *HealthCollector {
	c := &HealthCollector{system: system, done: make(chan struct{})}
	c.pid, _ = system.ProcessRegistry.Add(c, "health"+system.ProcessRegistry.NextId())
	return c
}

// PID is where the children send their answers.
func (c *HealthCollector) PID() *actor.PID { return c.pid }

// Expect sets the sweep's entries: statuses holds one entry per child in the
// order they are reported, and pending the indexes of those still to be
// answered by a HealthQuery; the others are final already. It is called once.
func (c *HealthCollector) Expect(statuses []actors.HealthStatus, pending []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expected || c.closed {
		return
	}
	c.expected = true
	c.statuses = statuses
	c.pending = make([]bool, len(statuses))
	for _, i := range pending {
		if !c.pending[i] {
			c.pending[i] = true
			c.remaining++
		}
	}
	if c.remaining == 0 {
		close(c.done)
	}
}

// Done is closed once every pending entry has been answered.
func (c *HealthCollector) Done() <-chan struct{} { return c.done }

// Close ends the sweep: it unregisters the collector (late answers become
// dead letters) and returns the entries, with unanswered ones marked
// unhealthy with the message silent. ok is false when Expect was never
// called (the supervisor did not take the request).
func (c *HealthCollector) Close(silent string) (statuses []actors.HealthStatus, ok bool) {
	c.system.ProcessRegistry.Remove(c.pid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for i, p := range c.pending {
		if p {
			c.statuses[i].Healthy = false
			c.statuses[i].Message = silent
		}
	}
	return c.statuses, c.expected
}

// SendUserMessage takes one HealthAnswer.
func (c *HealthCollector) SendUserMessage(_ *actor.PID, message interface{}) {
	if env, ok := message.(*actor.MessageEnvelope); ok {
		message = env.Message
	}
	a, ok := message.(HealthAnswer)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || a.Index < 0 || a.Index >= len(c.pending) || !c.pending[a.Index] {
		return
	}
	c.pending[a.Index] = false
	name := c.statuses[a.Index].Name
	c.statuses[a.Index] = a.Status
	c.statuses[a.Index].Name = name
	c.remaining--
	if c.remaining == 0 {
		close(c.done)
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
