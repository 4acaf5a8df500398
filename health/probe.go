package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

// outcome is the result of one check.
type outcome struct {
	name     string
	message  string // on success: a detail for the JSON report (the phase)
	err      error
	excluded bool // left out by ?exclude=: listed, not run
	// status is the controller's own entry, for the checks of a controller.
	status *actors.HealthStatus
}

// pending is a check of one request that has started.
type pending struct {
	done <-chan struct{}
	// result is the check's outcomes once done is closed: the controllers'
	// check has one per controller.
	result func() []outcome
	// expire is the outcome when the deadline passed first. It may find the
	// check done after all, and then returns its result.
	expire func() []outcome
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// settled is a pending that is done already.
func settled(o outcome) *pending {
	r := func() []outcome { return []outcome{o} }
	return &pending{done: closedChan, result: r, expire: r}
}

// await waits for every pending until budget has passed or ctx ends, and
// returns their outcomes in order; an outcome is expired once the wait is
// over. ok is false when ctx ended first (the client has gone).
func await(ctx context.Context, ps []*pending, budget time.Duration) (out []outcome, ok bool) {
	timer := time.NewTimer(budget)
	defer timer.Stop()
	over := false
	for _, p := range ps {
		if !over {
			select {
			case <-p.done:
			case <-timer.C:
				over = true
			case <-ctx.Done():
				over = true
			}
		}
		if over {
			select {
			case <-p.done:
			default:
				out = append(out, p.expire()...)
				continue
			}
		}
		out = append(out, p.result()...)
	}
	return out, ctx.Err() == nil
}

// shared runs one call into the Source at a time: the requests that arrive
// while it runs wait for its answer instead of starting another call. A
// call that hangs therefore costs one goroutine, however many probes come.
type shared[T any] struct {
	mu  sync.Mutex
	cur *flight[T]
}

// flight is one shared call.
type flight[T any] struct {
	done chan struct{}
	val  T
	err  error // a panic in the call
}

// start returns the call in flight, or starts fn as a new one.
func (s *shared[T]) start(fn func() T) *flight[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.cur; f != nil {
		return f
	}
	f := &flight[T]{done: make(chan struct{})}
	s.cur = f
	go func() {
		defer func() {
			if r := recover(); r != nil {
				f.err = fmt.Errorf("panic: %v", r)
			}
			s.mu.Lock()
			s.cur = nil
			s.mu.Unlock()
			close(f.done)
		}()
		f.val = fn()
	}()
	return f
}

// guard remembers the calls of one named check that overran their deadline
// and have not returned: while there is one, the check is not called again.
type guard struct {
	overdue atomic.Int32
}

// The states of a hostCall.
const (
	callRunning int32 = iota
	callReturned
	callAbandoned // its request gave up on it
)

// hostCall is one call of a Checker.
type hostCall struct {
	state atomic.Int32
	done  chan struct{}
	err   error
}

// startChecker calls c for r in a goroutine of its own, with r's context
// bounded by timeout.
func startChecker(c Checker, name string, g *guard, r *http.Request, timeout time.Duration) *pending {
	if g.overdue.Load() > 0 {
		return settled(outcome{name: name, err: fmt.Errorf("an earlier call has not returned yet, past its %s deadline", timeout)})
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	call := &hostCall{done: make(chan struct{})}
	go func() {
		defer cancel()
		err := runChecker(c, r.WithContext(ctx))
		call.err = err
		if !call.state.CompareAndSwap(callRunning, callReturned) {
			g.overdue.Add(-1)
		}
		close(call.done)
	}()
	result := func() []outcome { return []outcome{{name: name, err: call.err}} }
	return &pending{done: call.done, result: result, expire: func() []outcome {
		if call.state.CompareAndSwap(callRunning, callAbandoned) {
			g.overdue.Add(1)
			return []outcome{{name: name, err: fmt.Errorf("no answer within %s", timeout)}}
		}
		<-call.done // it returned as the deadline passed
		return result()
	}}
}

func runChecker(c Checker, r *http.Request) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("check panicked: %v", v)
		}
	}()
	return c.Check(r)
}

// stoppedError says why a manager that has stopped is not healthy.
func stoppedError(cause error) error {
	if cause == nil {
		return errors.New("manager stopped")
	}
	return fmt.Errorf("manager failed: %w", cause)
}

// noAnswer is the failure of a call into the Source that overran budget.
func noAnswer(call string, budget time.Duration) error {
	return fmt.Errorf("no answer from %s within %s", call, budget)
}
