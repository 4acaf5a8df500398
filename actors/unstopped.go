package actors

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Unstopped is a child whose Shutdown had not returned when its waiter gave
// up: who it is, how long its Shutdown had run, and where it is stuck.
type Unstopped struct {
	Name string
	Kind Kind
	// Call is the user call it is stuck in: "Shutdown", or, for a child
	// stopped while starting, the start call ("Run", "Recover", "Start")
	// that its Shutdown waits for.
	Call string
	// For is how long ago it was stopped.
	For time.Duration
	// Goroutine is the id of the goroutine running Call (0 if that
	// goroutine had not yet begun).
	Goroutine int64
	// Stack is that goroutine's stack as runtime.Stack prints it, its
	// "goroutine N [state]:" line first; empty when it could not be found.
	Stack string
}

func (u Unstopped) String() string {
	if u.Call != "" && u.Call != "Shutdown" {
		return fmt.Sprintf("%s %q (stopped %s ago, its %s has not returned: Shutdown waits for it)", u.Kind, u.Name, u.For.Round(time.Millisecond), u.Call)
	}
	return fmt.Sprintf("%s %q (Shutdown running for %s)", u.Kind, u.Name, u.For.Round(time.Millisecond))
}

// ShutdownWatch keeps track of the Shutdown calls made with a context that
// carries it (WithShutdownWatch), so that the one waiting for them can say,
// once it stops waiting, which have not returned and where each is stuck.
//
// A child that is already shutting down when a Stop carrying a watch
// arrives (a restart's Shutdown that has not returned when the manager
// shuts down) adds its running call to that watch too: it is watched by
// every Stop that waits for it.
type ShutdownWatch struct {
	mu    sync.Mutex
	calls []*userCall
}

// NewShutdownWatch returns an empty watch.
func NewShutdownWatch() *ShutdownWatch { return &ShutdownWatch{} }

type watchKey struct{}

// WithShutdownWatch returns ctx carrying w: the Shutdown calls a child runs
// for a Stop with that context (or a context derived from it) are watched by w.
func WithShutdownWatch(ctx context.Context, w *ShutdownWatch) context.Context {
	return context.WithValue(ctx, watchKey{}, w)
}

// ShutdownWatchFrom returns the watch ctx carries, or nil.
func ShutdownWatchFrom(ctx context.Context) *ShutdownWatch { return watchOf(ctx) }

func watchOf(ctx context.Context) *ShutdownWatch {
	if ctx == nil {
		return nil
	}
	w, _ := ctx.Value(watchKey{}).(*ShutdownWatch)
	return w
}

// Unstopped returns the watched Shutdown calls that have not returned, in
// the order they began, each with the stack of the goroutine running it.
// It takes a stack dump of every goroutine (runtime.Stack with all set,
// which stops the world for the time it takes) only when there is one.
func (w *ShutdownWatch) Unstopped() []Unstopped {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	calls := slices.Clone(w.calls)
	w.mu.Unlock()
	var out []Unstopped
	now := time.Now()
	for _, c := range calls {
		if c.returned.Load() {
			continue
		}
		u := Unstopped{Name: c.name, Kind: c.kind, Call: c.op, For: now.Sub(c.began), Goroutine: c.goroutine.Load()}
		if w := c.waitsFor; w != nil && u.Goroutine == 0 && !w.returned.Load() {
			u.Call, u.Goroutine = w.op, w.goroutine.Load()
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil
	}
	wanted := make(map[int64]string, len(out))
	for _, u := range out {
		wanted[u.Goroutine] = ""
	}
	goroutineStacks(wanted)
	for i := range out {
		out[i].Stack = wanted[out[i].Goroutine]
	}
	return out
}

func (w *ShutdownWatch) add(c *userCall) {
	if w == nil || c == nil {
		return
	}
	w.mu.Lock()
	if !slices.Contains(w.calls, c) {
		w.calls = append(w.calls, c)
	}
	w.mu.Unlock()
}

// userCall is one user call of a child (its Shutdown, or its start call),
// as watches see it.
type userCall struct {
	name      string
	kind      Kind
	op        string // "Shutdown", "Run", "Recover", "Start"
	began     time.Time
	goroutine atomic.Int64 // set by the goroutine running the call
	returned  atomic.Bool
	// waitsFor is the start call a Shutdown waits for, when the child was
	// stopped while starting: until it returns, that is where it is stuck.
	waitsFor *userCall
}

// enter records the calling goroutine as the one running the call.
func (c *userCall) enter() { c.goroutine.Store(currentGoroutine()) }

// exit records that the call has returned.
func (c *userCall) exit() { c.returned.Store(true) }

// currentGoroutine is the calling goroutine's id, from the first line of its
// stack ("goroutine 123 [running]:"): Go has no other way to tell it.
func currentGoroutine() int64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _ := parseGoroutineHeader(buf[:n])
	return id
}

// parseGoroutineHeader reads the id from a stack's first line.
func parseGoroutineHeader(b []byte) (int64, bool) {
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(b, ' ')
	if end < 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(string(b[:end]), 10, 64)
	return id, err == nil
}

// goroutineStacks dumps every goroutine's stack and fills in the stacks of
// those in wanted.
func goroutineStacks(wanted map[int64]string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for block := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if id, ok := parseGoroutineHeader(block); ok {
			if _, want := wanted[id]; want {
				wanted[id] = string(bytes.TrimRight(block, "\n"))
			}
		}
	}
}
