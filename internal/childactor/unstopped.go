package childactor

import (
	"bytes"
	"context"
	"maps"
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
//
// A watch made with NewShutdownWatchUntil also judges every call against
// its context, by one rule: a call overran when the context had ended
// before it returned. The call itself records that, as it returns (it reads
// the context's Err there), so the verdict cannot depend on when the waiter
// next looks: see Unstopped.
type ShutdownWatch struct {
	mu    sync.Mutex
	calls []*userCall
	// handedOutLate are the calls made for a Stop taken once ctx had
	// ended: their Shutdown had not even been called when it ended.
	handedOutLate map[*userCall]bool

	// ctx is the context the watched calls are judged against (nil: none).
	ctx context.Context
	// late holds, by call, how long each call that returned after ctx had
	// ended ran: written by the returning call, under openWatches.mu.
	late map[*userCall]time.Duration

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

// openWatches are the watches made by NewShutdownWatchUntil that are not
// closed yet. A Shutdown call that returns records, under mu, in each of
// them whether its context had ended, and only then counts as returned: a
// waiter that reads a call under mu sees either a call that has not
// returned or one whose verdict is written.
var openWatches struct {
	mu  sync.Mutex
	set map[*ShutdownWatch]struct{}
}

// NewShutdownWatchUntil returns an empty watch that judges the calls it
// watches against ctx (see Unstopped). Close it once its waiter has
// reported.
func NewShutdownWatchUntil(ctx context.Context) *ShutdownWatch {
	w := &ShutdownWatch{ctx: ctx}
	openWatches.mu.Lock()
	if openWatches.set == nil {
		openWatches.set = map[*ShutdownWatch]struct{}{}
	}
	openWatches.set[w] = struct{}{}
	openWatches.mu.Unlock()
	return w
}

// Close stops w judging the calls that return from now on.
func (w *ShutdownWatch) Close() {
	if w == nil || w.ctx == nil {
		return
	}
	openWatches.mu.Lock()
	delete(openWatches.set, w)
	openWatches.mu.Unlock()
}

// settle marks c returned, having recorded in every open watch whose
// context has ended that c returned after it.
func (c *userCall) settle() {
	openWatches.mu.Lock()
	for w := range openWatches.set {
		if w.ctx.Err() != nil {
			if w.late == nil {
				w.late = map[*userCall]time.Duration{}
			}
			w.late[c] = time.Since(c.began)
		}
	}
	c.returned.Store(true)
	openWatches.mu.Unlock()
}

type watchKey struct{}

// WithShutdownWatch returns ctx carrying w: the Shutdown calls a child runs
// for a Stop with that context (or a context derived from it) are watched by w.
func WithShutdownWatch(ctx context.Context, w *ShutdownWatch) context.Context {
	return context.WithValue(ctx, watchKey{}, w)
}

// judges reports whether w judges its calls against a context: whether it
// is a ShutdownAndWait's (NewShutdownWatchUntil).
func (w *ShutdownWatch) judges() bool { return w != nil && w.ctx != nil }

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
//
// A watch made by NewShutdownWatchUntil adds the calls that returned after
// its context had ended: they overran it as surely as those still running.
// Each is listed as the context's end found it: a call made for a Stop
// taken after the end as not stopped yet (no Call, no For), any other with
// how long it ran in all and, when the last Snapshot found it, its stack
// then.
func (w *ShutdownWatch) Unstopped() []actors.Unstopped {
	if w == nil {
		return nil
	}
	stuck, late := w.judge()
	if len(stuck) == 0 && len(late) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]actors.Unstopped, len(stuck), len(stuck)+len(late))
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
	if len(late) == 0 {
		return out
	}
	// In the order they began, the late among the stuck.
	listed := make([]listedCall, 0, len(out)+len(late))
	for i := range out {
		listed = append(listed, listedCall{Unstopped: out[i], began: stuck[i].call.began})
	}
	listed = append(listed, late...)
	slices.SortStableFunc(listed, func(a, b listedCall) int { return a.began.Compare(b.began) })
	for i, l := range listed {
		if i < len(out) {
			out[i] = l.Unstopped
			continue
		}
		out = append(out, l.Unstopped)
	}
	return out
}

// listedCall is a call as Unstopped lists it, and when it began.
type listedCall struct {
	actors.Unstopped
	began time.Time
}

// judge returns the calls that have not returned and, for a watch with a
// context, those that returned after it had ended, read at one moment:
// under openWatches.mu, which a returning call holds from its verdict to
// its being marked returned.
func (w *ShutdownWatch) judge() (stuck []stuckCall, late []listedCall) {
	if w.ctx == nil {
		return w.stuck(), nil
	}
	openWatches.mu.Lock()
	defer openWatches.mu.Unlock()
	stuck = w.stuck()
	w.mu.Lock()
	calls := slices.Clone(w.calls)
	handedOutLate := maps.Clone(w.handedOutLate)
	w.mu.Unlock()
	seen := make(map[*userCall]bool, len(calls))
	for _, c := range calls {
		ran, ok := w.late[c]
		if seen[c] || !ok {
			continue
		}
		seen[c] = true
		u := actors.Unstopped{Name: c.name, Kind: c.kind}
		if !handedOutLate[c] {
			u.Call, u.For = c.op, ran
			w.snapMu.Lock()
			if f, ok := w.snapshot[c.id]; ok && f.goroutine != 0 {
				u.Goroutine, u.Stack = f.goroutine, f.stack
			}
			w.snapMu.Unlock()
		}
		late = append(late, listedCall{Unstopped: u, began: c.began})
	}
	slices.SortStableFunc(late, func(a, b listedCall) int { return a.began.Compare(b.began) })
	return stuck, late
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

// handOut adds c, a Shutdown call made for a Stop carrying w, noting
// whether w's context had ended already.
func (w *ShutdownWatch) handOut(c *userCall) {
	if w == nil || c == nil {
		return
	}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	if w.ctx != nil && w.ctx.Err() != nil {
		if w.handedOutLate == nil {
			w.handedOutLate = map[*userCall]bool{}
		}
		w.handedOutLate[c] = true
	}
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
	c.exit()
}

// exit records that the call has returned (or was never made). A Shutdown
// call is judged by the open watches as it returns (settle); a start call
// only ever matters to a watch as what a Shutdown waits for.
func (c *userCall) exit() {
	if c.op == "Shutdown" {
		c.settle()
		return
	}
	c.returned.Store(true)
}

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
