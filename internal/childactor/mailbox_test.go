package childactor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingInvoker records what the mailbox hands it, in order, and fails
// the test if two goroutines are ever in it at once. onUser and onSystem,
// if set, run inside the invoker (to post from it, or to panic).
type recordingInvoker struct {
	t        *testing.T
	inside   atomic.Int32
	mu       sync.Mutex
	got      []any
	failures []failure
	onUser   func(msg any)
	onSystem func(msg any)
	onFail   func(reason, msg any)
}

type failure struct{ reason, msg any }

func (r *recordingInvoker) enter(msg any) {
	if n := r.inside.Add(1); n != 1 {
		r.t.Errorf("%d goroutines in the invoker at once (message %v)", n, msg)
	}
	r.mu.Lock()
	r.got = append(r.got, msg)
	r.mu.Unlock()
}

func (r *recordingInvoker) InvokeSystemMessage(msg any) {
	r.enter(msg)
	defer r.inside.Add(-1)
	if r.onSystem != nil {
		r.onSystem(msg)
	}
}

func (r *recordingInvoker) InvokeUserMessage(msg any) {
	r.enter(msg)
	defer r.inside.Add(-1)
	if r.onUser != nil {
		r.onUser(msg)
	}
}

func (r *recordingInvoker) EscalateFailure(reason, msg any) {
	r.mu.Lock()
	r.failures = append(r.failures, failure{reason, msg})
	r.mu.Unlock()
	if r.onFail != nil {
		r.onFail(reason, msg)
	}
}

func (r *recordingInvoker) received() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.got...)
}

func newTestMailbox(t *testing.T) (*inlineMailbox, *recordingInvoker) {
	inv := &recordingInvoker{t: t}
	m := newInlineMailbox().(*inlineMailbox)
	m.RegisterHandlers(inv, nil)
	m.Start()
	return m, inv
}

// sys is a system message of the tests.
type sys string

func TestMailboxRunsAPostToAnIdleMailboxBeforeThePostReturns(t *testing.T) {
	m, inv := newTestMailbox(t)
	m.PostUserMessage("u1")
	assert.Equal(t, []any{"u1"}, inv.received())
	m.PostSystemMessage(sys("s1"))
	assert.Equal(t, []any{"u1", sys("s1")}, inv.received())
}

func TestMailboxOrder(t *testing.T) {
	tests := []struct {
		name string
		// posted inside the invoker, while it runs "first"
		posted []any
		want   []any
	}{
		{"user messages in order", []any{"u1", "u2", "u3"}, []any{"first", "u1", "u2", "u3"}},
		{"system messages in order", []any{sys("s1"), sys("s2")}, []any{"first", sys("s1"), sys("s2")}},
		{"system before user", []any{"u1", "u2", sys("s1"), "u3", sys("s2")},
			[]any{"first", sys("s1"), sys("s2"), "u1", "u2", "u3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, inv := newTestMailbox(t)
			inv.onUser = func(msg any) {
				if msg != "first" {
					return
				}
				for _, p := range tt.posted {
					if s, ok := p.(sys); ok {
						m.PostSystemMessage(s)
					} else {
						m.PostUserMessage(p)
					}
				}
				// Posted while running: queued for this goroutine, not run.
				assert.Equal(t, []any{"first"}, inv.received())
			}
			m.PostUserMessage("first")
			assert.Equal(t, tt.want, inv.received())
			assert.Zero(t, m.UserMessageCount())
		})
	}
}

func TestMailboxSuspendResume(t *testing.T) {
	m, inv := newTestMailbox(t)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage("u1")
	m.PostUserMessage("u2")
	assert.Empty(t, inv.received(), "user messages ran while suspended; SuspendMailbox reached the invoker")
	assert.Equal(t, 2, m.UserMessageCount())

	m.PostSystemMessage(sys("s1"))
	assert.Equal(t, []any{sys("s1")}, inv.received(), "a system message waits while suspended")

	m.PostSystemMessage(&actor.ResumeMailbox{})
	assert.Equal(t, []any{sys("s1"), "u1", "u2"}, inv.received())
	assert.Zero(t, m.UserMessageCount())

	m.PostUserMessage("u3")
	assert.Equal(t, []any{sys("s1"), "u1", "u2", "u3"}, inv.received())
}

func TestMailboxSuspendedWhileRunningStopsBeforeTheNextUserMessage(t *testing.T) {
	m, inv := newTestMailbox(t)
	inv.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage("u2")
			m.PostSystemMessage(&actor.SuspendMailbox{})
		}
	}
	m.PostUserMessage("u1")
	assert.Equal(t, []any{"u1"}, inv.received())
	assert.Equal(t, 1, m.UserMessageCount())
	m.PostSystemMessage(&actor.ResumeMailbox{})
	assert.Equal(t, []any{"u1", "u2"}, inv.received())
}

// TestMailboxConcurrentPosters posts from many goroutines at once, from
// inside the invoker too: every message runs once, each poster's in its
// order, one goroutine in the invoker at a time (checked by the invoker and
// by -race), and all have run once every post has returned.
func TestMailboxConcurrentPosters(t *testing.T) {
	const posters, each = 8, 500
	m, inv := newTestMailbox(t)
	type msg struct{ poster, seq int }
	var echoes atomic.Int32
	inv.onUser = func(x any) {
		// Post from inside, as a child does to itself.
		if p := x.(msg); p.seq%100 == 0 && p.poster >= 0 {
			echoes.Add(1)
			m.PostUserMessage(msg{poster: -1, seq: p.poster*each + p.seq})
		}
	}
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range each {
				if i%50 == 0 {
					m.PostSystemMessage(sys(fmt.Sprint(p, i)))
				}
				m.PostUserMessage(msg{p, i})
			}
		})
	}
	wg.Wait()

	next := make([]int, posters)
	var user, system int
	for _, x := range inv.received() {
		switch x := x.(type) {
		case sys:
			system++
		case msg:
			user++
			if x.poster < 0 {
				continue
			}
			require.Equal(t, next[x.poster], x.seq, "poster %d's messages out of order", x.poster)
			next[x.poster]++
		}
	}
	assert.Equal(t, posters*each+int(echoes.Load()), user)
	assert.Equal(t, posters*each/50, system)
	assert.Zero(t, m.UserMessageCount())
}

func TestMailboxEscalatesAPanicAndGoesOn(t *testing.T) {
	m, inv := newTestMailbox(t)
	boom := fmt.Errorf("boom")
	inv.onUser = func(msg any) {
		switch msg {
		case "u1":
			m.PostUserMessage("u2")
			m.PostUserMessage("u3")
		case "u2":
			panic(boom)
		}
	}
	m.PostUserMessage("u1")
	assert.Equal(t, []any{"u1", "u2", "u3"}, inv.received())
	assert.Equal(t, []failure{{boom, "u2"}}, inv.failures)

	// A panicking system message is escalated the same way.
	inv.onSystem = func(any) { panic("sys boom") }
	m.PostSystemMessage(sys("s1"))
	assert.Equal(t, []failure{{boom, "u2"}, {"sys boom", sys("s1")}}, inv.failures)
	inv.onSystem = nil

	// The mailbox is idle again: a post runs at once.
	m.PostUserMessage("u4")
	assert.Equal(t, []any{"u1", "u2", "u3", sys("s1"), "u4"}, inv.received())
}

// TestMailboxEscalationThatSuspends does what protoactor's actor context
// does on a failure: EscalateFailure posts SuspendMailbox to its own
// mailbox, so the user messages behind the panic wait for the supervisor's
// decision, and system messages still run.
func TestMailboxEscalationThatSuspends(t *testing.T) {
	m, inv := newTestMailbox(t)
	inv.onFail = func(any, any) { m.PostSystemMessage(&actor.SuspendMailbox{}) }
	inv.onUser = func(msg any) {
		if msg == "u1" {
			m.PostUserMessage("u2")
			panic("boom")
		}
	}
	m.PostUserMessage("u1")
	assert.Equal(t, []any{"u1"}, inv.received())
	assert.Equal(t, 1, m.UserMessageCount())

	m.PostSystemMessage(sys("restart"))
	m.PostSystemMessage(&actor.ResumeMailbox{})
	assert.Equal(t, []any{"u1", sys("restart"), "u2"}, inv.received())
}

// TestMailboxIdleHoldsNoQueue checks the point of the mailbox: once a burst
// is drained the queues' storage is released, and a post to an idle
// mailbox allocates nothing.
func TestMailboxIdleHoldsNoQueue(t *testing.T) {
	m, inv := newTestMailbox(t)
	inv.onUser = func(msg any) {
		if msg == "first" {
			for range 20 {
				m.PostUserMessage("more")
				m.PostSystemMessage(sys("more"))
			}
		}
	}
	m.PostUserMessage("first")
	require.Len(t, inv.received(), 41)
	assert.Nil(t, m.queued)

	var cheap actor.MessageInvoker = nopInvoker{}
	m.RegisterHandlers(cheap, nil)
	msg, s := any("u"), any(sys("s"))
	allocs := testing.AllocsPerRun(100, func() {
		m.PostUserMessage(msg)
		m.PostSystemMessage(s)
	})
	assert.Zero(t, allocs)
}

type nopInvoker struct{}

func (nopInvoker) InvokeSystemMessage(any)  {}
func (nopInvoker) InvokeUserMessage(any)    {}
func (nopInvoker) EscalateFailure(any, any) {}

func BenchmarkMailbox(b *testing.B) {
	b.Run("inline/idle post", func(b *testing.B) {
		m := newInlineMailbox()
		m.RegisterHandlers(nopInvoker{}, nil)
		benchPosts(b, m)
	})
	b.Run("protoactor/synchronized", func(b *testing.B) {
		m := actor.Unbounded()()
		m.RegisterHandlers(nopInvoker{}, actor.NewSynchronizedDispatcher(300))
		benchPosts(b, m)
	})
}

func benchPosts(b *testing.B, m actor.Mailbox) {
	msg := any("u")
	b.ReportAllocs()
	for b.Loop() {
		m.PostUserMessage(msg)
	}
}
