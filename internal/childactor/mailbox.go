package childactor

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// inlineMailbox is a child actor's mailbox: it runs the child's messages on
// the goroutine that posts them, and holds no queue storage while idle.
//
// It keeps the semantics of protoactor's default mailbox under the
// synchronized dispatcher, which children used before it:
//
//   - one message at a time, in the order posted, never two goroutines in
//     the invoker at once;
//   - system messages before user messages: a queued system message runs
//     before any queued user message;
//   - *actor.SuspendMailbox and *actor.ResumeMailbox are the mailbox's own:
//     while suspended, user messages wait and system messages still run;
//   - a message posted while the mailbox runs is run by the goroutine
//     already running it, before that goroutine returns; a message posted
//     to an idle mailbox runs on the posting goroutine before the post
//     returns;
//   - a panic in the invoker is recovered and handed to
//     invoker.EscalateFailure with the message that panicked, and the
//     mailbox goes on with the next message (protoactor's EscalateFailure
//     posts a SuspendMailbox first, which then runs before anything else).
//
// What it leaves out: mailbox middlewares (the children's Props use none),
// the expansion of actor.MessageBatch (nothing sends batches to a child),
// and the dispatcher handed to RegisterHandlers, which it ignores: it is its
// own dispatcher. It does not yield every Throughput messages as
// protoactor's loop does with runtime.Gosched: under the synchronized
// dispatcher that yield hands the mailbox to no other goroutine, it only
// pauses the poster, and Go's scheduler preempts a long burst anyway.
//
// Cost while idle: the struct, 48 bytes (protoactor's ring, queue wrapper,
// mailbox and mpsc queue: about 376). A message posted to an idle mailbox
// is not queued at all; the queues are made only when messages arrive while
// the mailbox runs, reused for the rest of that run and dropped when the
// mailbox goes idle.
type inlineMailbox struct {
	mu sync.Mutex
	// running is true while a goroutine is in drain; it alone may call the
	// invoker. While it is false no system message waits, nor any user
	// message unless suspended.
	running   bool
	suspended bool
	// queued holds the messages waiting; nil while the mailbox is idle with
	// none waiting.
	queued  *queues
	invoker actor.MessageInvoker
}

// queues are the messages waiting in an inlineMailbox.
type queues struct {
	system, user fifo
}

// queues returns m's queues, made on demand; m.mu is held.
func (m *inlineMailbox) queues() *queues {
	if m.queued == nil {
		m.queued = &queues{}
	}
	return m.queued
}

var _ actor.Mailbox = (*inlineMailbox)(nil)

// newInlineMailbox is the children's actor.MailboxProducer.
func newInlineMailbox() actor.Mailbox { return &inlineMailbox{} }

// PostUserMessage runs msg now if the mailbox is idle and not suspended, or
// queues it for the goroutine running the mailbox (or for the resume).
func (m *inlineMailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	if m.running || m.suspended {
		m.queues().user.push(msg)
		m.mu.Unlock()
		return
	}
	m.running = true
	m.mu.Unlock()
	m.drain(msg, false)
}

// PostSystemMessage runs msg now if the mailbox is idle, or queues it ahead
// of the user messages for the goroutine running the mailbox.
func (m *inlineMailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	if m.running {
		m.queues().system.push(msg)
		m.mu.Unlock()
		return
	}
	m.running = true
	m.mu.Unlock()
	m.drain(msg, true)
}

// RegisterHandlers sets the invoker; the dispatcher is not used (see
// inlineMailbox).
func (m *inlineMailbox) RegisterHandlers(invoker actor.MessageInvoker, _ actor.Dispatcher) {
	m.invoker = invoker
}

// Start does nothing: there are no middlewares to tell.
func (*inlineMailbox) Start() {}

// UserMessageCount returns the number of user messages waiting.
func (m *inlineMailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queued == nil {
		return 0
	}
	return m.queued.user.len()
}

// drain runs msg, then every queued message, until the mailbox is empty (or
// suspended with only user messages left). The caller has set running.
func (m *inlineMailbox) drain(msg any, system bool) {
	for more := true; more; {
		msg, system, more = m.runUntilPanic(msg, system)
	}
}

// runUntilPanic runs msg and the queued messages after it. It returns when
// the mailbox is drained (more false), or after a panic in the invoker,
// escalated, with the message after the one that panicked.
func (m *inlineMailbox) runUntilPanic(msg any, system bool) (nextMsg any, nextSystem, more bool) {
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
			nextMsg, nextSystem, more = m.next()
		}
	}()
	for {
		if system {
			m.invokeSystem(msg)
		} else {
			m.invoker.InvokeUserMessage(msg)
		}
		var ok bool
		if msg, system, ok = m.next(); !ok {
			return nil, false, false
		}
	}
}

func (m *inlineMailbox) invokeSystem(msg any) {
	switch msg.(type) {
	case *actor.SuspendMailbox:
		m.mu.Lock()
		m.suspended = true
		m.mu.Unlock()
	case *actor.ResumeMailbox:
		m.mu.Lock()
		m.suspended = false
		m.mu.Unlock()
	default:
		m.invoker.InvokeSystemMessage(msg)
	}
}

// next pops the next message to run, system first; with none (or only user
// messages while suspended) it marks the mailbox idle and returns ok false,
// under the same lock a poster checks running with, so no post is missed.
func (m *inlineMailbox) next() (msg any, system, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.queued; q != nil {
		if q.system.len() > 0 {
			return q.system.pop(), true, true
		}
		if !m.suspended && q.user.len() > 0 {
			return q.user.pop(), false, true
		}
		// An idle child holds no queues (a suspended one keeps its
		// waiting user messages); a run reuses them.
		if q.user.len() == 0 {
			m.queued = nil
		}
	}
	m.running = false
	return nil, false, false
}

// fifo is a queue of messages in a slice, reused as messages come and go.
type fifo struct {
	items []any
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(msg any) { q.items = append(q.items, msg) }

// pop removes and returns the first message; q must not be empty.
func (q *fifo) pop() any {
	msg := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return msg
}
