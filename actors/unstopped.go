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

	// snapshot holds the stacks Snapshot dumped, by goroutine, each with
	// the call that goroutine ran then.
	snapMu   sync.Mutex
	snapshot map[int64]snapshotStack
}

type snapshotStack struct {
	call  *userCall
	stack string
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

// stuckCall is a watched call that has not returned, and where it is
// stuck: the goroutine of the call itself, or of the start call it waits
// for.
type stuckCall struct {
	call, in  *userCall
	goroutine int64
}

// stuck returns the watched calls that have not returned, each once, in
// the order they began.
func (w *ShutdownWatch) stuck() []stuckCall {
	w.mu.Lock()
	calls := slices.Clone(w.calls)
	w.mu.Unlock()
	var out []stuckCall
	seen := make(map[*userCall]bool, len(calls))
	for _, c := range calls {
		if seen[c] || c.returned.Load() {
			continue
		}
		seen[c] = true
		sc := stuckCall{call: c, in: c, goroutine: c.goroutine.Load()}
		if w := c.waitsFor; w != nil && sc.goroutine == 0 && !w.returned.Load() {
			sc.in, sc.goroutine = w, w.goroutine.Load()
		}
		out = append(out, sc)
	}
	slices.SortStableFunc(out, func(a, b stuckCall) int { return a.call.began.Compare(b.call.began) })
	return out
}

// Snapshot dumps, now, the stacks of the watched calls that have not
// returned, for Unstopped to use. The dump stops the world for a time that
// grows with the number of goroutines (about 1.5ms per thousand): a waiter
// calls Snapshot shortly before its deadline so that Unstopped, at the
// deadline, costs next to nothing. Calls that began since, or whose
// goroutine has changed, are dumped again by Unstopped.
func (w *ShutdownWatch) Snapshot() {
	if w == nil {
		return
	}
	stuck := w.stuck()
	if len(stuck) == 0 {
		return
	}
	wanted := make(map[int64]string, len(stuck))
	for _, sc := range stuck {
		wanted[sc.goroutine] = ""
	}
	goroutineStacks(wanted)
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	w.snapshot = make(map[int64]snapshotStack, len(stuck))
	for _, sc := range stuck {
		w.snapshot[sc.goroutine] = snapshotStack{call: sc.in, stack: wanted[sc.goroutine]}
	}
}

// Unstopped returns the watched Shutdown calls that have not returned, in
// the order they began, each with the stack of the goroutine where it is
// stuck: from the last Snapshot when it holds it, else from a dump of every
// goroutine's stack (runtime.Stack with all set), taken only when needed.
func (w *ShutdownWatch) Unstopped() []Unstopped {
	if w == nil {
		return nil
	}
	stuck := w.stuck()
	if len(stuck) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]Unstopped, len(stuck))
	w.snapMu.Lock() // also waits for a Snapshot in progress
	var missing map[int64]string
	for i, sc := range stuck {
		out[i] = Unstopped{Name: sc.call.name, Kind: sc.call.kind, Call: sc.in.op, For: now.Sub(sc.call.began), Goroutine: sc.goroutine}
		if snap, ok := w.snapshot[sc.goroutine]; ok && snap.call == sc.in && sc.goroutine != 0 {
			out[i].Stack = snap.stack
			continue
		}
		if sc.goroutine == 0 {
			continue // its goroutine has not begun: there is no stack yet
		}
		if missing == nil {
			missing = map[int64]string{}
		}
		missing[sc.goroutine] = ""
	}
	w.snapMu.Unlock()
	if missing != nil {
		goroutineStacks(missing)
		for i := range out {
			if stack, ok := missing[out[i].Goroutine]; ok && out[i].Stack == "" {
				out[i].Stack = stack
			}
		}
	}
	return out
}

func (w *ShutdownWatch) add(c *userCall) {
	if w == nil || c == nil {
		return
	}
	w.mu.Lock()
	w.calls = append(w.calls, c) // a call added twice is reported once
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
// those in wanted. The buffer is sized for the goroutines there are (about
// a kilobyte each) so that the dump, which stops the world, is seldom taken
// twice.
func goroutineStacks(wanted map[int64]string) {
	buf := make([]byte, max(64<<10, runtime.NumGoroutine()<<10))
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
