package childactor

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/actors"
)

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

	// snapshot holds where Snapshot found the calls that had not returned,
	// by call.
	snapMu   sync.Mutex
	snapshot map[uint64]foundCall
}

// foundCall is where a dump of every goroutine found a call: its goroutine
// and that goroutine's stack.
type foundCall struct {
	goroutine int64
	stack     string
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

// stuckCall is a watched call that has not returned, and the call it is
// stuck in: itself, or the start call it waits for.
type stuckCall struct {
	call, in *userCall
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
		sc := stuckCall{call: c, in: c}
		if w := c.waitsFor; w != nil && !c.begun.Load() && !w.returned.Load() {
			sc.in = w
		}
		out = append(out, sc)
	}
	slices.SortStableFunc(out, func(a, b stuckCall) int { return a.call.began.Compare(b.call.began) })
	return out
}

// Snapshot finds, now, where the watched calls that have not returned are
// stuck, for Unstopped to use. It takes a dump of every goroutine's stack,
// which stops the world for a time that grows with the number of
// goroutines (about 1.5ms per thousand): a waiter calls Snapshot shortly
// before its deadline so that Unstopped, at the deadline, costs next to
// nothing. Calls that began since are looked for again by Unstopped.
func (w *ShutdownWatch) Snapshot() {
	if w == nil {
		return
	}
	stuck := w.stuck()
	if len(stuck) == 0 {
		return
	}
	wanted := make(map[uint64]foundCall, len(stuck))
	for _, sc := range stuck {
		wanted[sc.in.id] = foundCall{}
	}
	findCalls(wanted)
	w.snapMu.Lock()
	w.snapshot = wanted
	w.snapMu.Unlock()
}

// Unstopped returns the watched Shutdown calls that have not returned, in
// the order they began, each with the stack of the goroutine where it is
// stuck: from the last Snapshot when it found it, else from a dump of
// every goroutine's stack (runtime.Stack with all set), taken only when
// needed.
func (w *ShutdownWatch) Unstopped() []actors.Unstopped {
	if w == nil {
		return nil
	}
	stuck := w.stuck()
	if len(stuck) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]actors.Unstopped, len(stuck))
	found := make([]foundCall, len(stuck))
	var missing map[uint64]foundCall
	w.snapMu.Lock() // also waits for a Snapshot in progress
	for i, sc := range stuck {
		out[i] = actors.Unstopped{Name: sc.call.name, Kind: sc.call.kind, Call: sc.in.op, For: now.Sub(sc.call.began)}
		if f, ok := w.snapshot[sc.in.id]; ok && f.goroutine != 0 {
			found[i] = f
			continue
		}
		if missing == nil {
			missing = map[uint64]foundCall{}
		}
		missing[sc.in.id] = foundCall{}
	}
	w.snapMu.Unlock()
	if missing != nil {
		findCalls(missing)
	}
	for i, sc := range stuck {
		f := found[i]
		if f.goroutine == 0 {
			f = missing[sc.in.id]
		}
		out[i].Goroutine, out[i].Stack = f.goroutine, f.stack
	}
	return out
}

// Watched returns the names of the children with a call in w, returned or
// not: those that have taken a Stop carrying w.
func (w *ShutdownWatch) Watched() map[string]bool {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make(map[string]bool, len(w.calls))
	for _, c := range w.calls {
		names[c.name] = true
	}
	return names
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
	id       uint64 // unique in the process: hostCall prints it
	name     string
	kind     actors.Kind
	op       string // "Shutdown", "Run", "Recover", "Start"
	began    time.Time
	begun    atomic.Bool // its goroutine has entered hostCall
	returned atomic.Bool
	// waitsFor is the start call a Shutdown waits for, when the child was
	// stopped while starting: until it returns, that is where it is stuck.
	// Set before the call is added to a watch, and never after: a watch
	// reads it from another goroutine without a lock.
	waitsFor *userCall
}

var lastCallID atomic.Uint64

func newUserCall(spec Spec, op string) *userCall {
	return &userCall{id: lastCallID.Add(1), name: spec.Name, kind: spec.Kind, op: op, began: time.Now()}
}

// run runs fn as the call, in hostCall, whose frame marks the goroutine
// as the call's in a dump of every goroutine's stack.
func (c *userCall) run(fn func()) {
	c.begun.Store(true)
	hostCall(c.id, fn)
	c.returned.Store(true)
}

// exit records that the call has returned (or was never made).
func (c *userCall) exit() { c.returned.Store(true) }

// hostCall runs fn, the user call whose id is id. Its frame prints as
// "childactor.hostCall(0x2a, ...)" in a stack dump: id stays live after fn
// returns, so the traceback prints it exactly (no "?"). That is how a dump
// tells which goroutine runs which call, at no cost to the call (a few
// nanoseconds, where taking the goroutine's id with runtime.Stack costs
// microseconds per call).
//
//go:noinline
func hostCall(id uint64, fn func()) {
	fn()
	if id == 0 {
		panic("actors: a user call without an id")
	}
}

// hostCallFrame is how hostCall's frame begins in a dump.
var hostCallFrame = []byte("/childactor.hostCall(0x")

// parseGoroutineHeader reads the id from a stack's first line
// ("goroutine 123 [running]:").
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

// findCalls dumps every goroutine's stack and fills in, for each call id in
// wanted, the goroutine that runs it (in hostCall) and its stack. The
// buffer is sized for the goroutines there are (about a kilobyte each) so
// that the dump, which stops the world, is seldom taken twice.
func findCalls(wanted map[uint64]foundCall) {
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
		at := bytes.Index(block, hostCallFrame)
		if at < 0 {
			continue
		}
		hex := block[at+len(hostCallFrame):]
		end := bytes.IndexFunc(hex, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) })
		if end <= 0 {
			continue
		}
		id, err := strconv.ParseUint(string(hex[:end]), 16, 64)
		if err != nil {
			continue
		}
		if _, want := wanted[id]; !want {
			continue
		}
		g, _ := parseGoroutineHeader(block)
		wanted[id] = foundCall{goroutine: g, stack: string(bytes.TrimRight(block, "\n"))}
	}
}
