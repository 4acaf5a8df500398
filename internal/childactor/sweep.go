package childactor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// healthStall is how long the workers of a sweep may all stay inside their
// calls, none taking another, while calls wait, before they are taken for
// hung and fresh workers take the queue over. It is a scheduling heuristic
// on the real clock, not a deadline: a slow call taken for hung costs a
// goroutine, no more, and the sweep's deadline stays on the manager's clock.
const healthStall = 2 * time.Millisecond

// healthRun is one child's health call queued on a sweep, with the
// incarnation it asks (for the callFailed of a panic).
type healthRun struct {
	c   *child
	gen uint64
}

// healthRuns is the run queue of one sweep's health calls. The children
// queue their calls while the supervisor sends the queries (their mailboxes
// run inline on the sender's goroutine); once the queries are sent,
// dispatch hands them to a few workers, about one per processor, that take
// the calls one after another: a goroutine per worker instead of one per
// child, and one atomic add per call instead of a goroutine handed over.
//
// The queue is cut in stripes by the entry's index, one per worker, each
// with its own lock and cursor: senders that send the queries of different
// ranges of entries queue on different stripes, and a worker takes the
// calls of its stripe, then those left in the others, so that nobody shares
// a cache line but at the ends. A call queued after dispatch (a query its
// child took late, its mailbox busy on another goroutine) runs on a
// goroutine of its own.
//
// No call waits long on another: a watchdog, on the real clock and armed
// while calls wait, looks every healthStall; if no worker has taken a call
// since its last look, every worker is inside a call that has lasted that
// long, and it retires them all (each ends once its call returns) and
// starts fresh ones. A hung GetHealth thus keeps its own goroutine only,
// and delays the calls behind it by a healthStall or two.
type healthRuns struct {
	entries int // of the sweep: a call's stripe is by its entry's index
	stripes []healthStripe
	epoch   atomic.Uint64 // a worker of a retired epoch takes no more calls

	mu         sync.Mutex // dispatch and the watchdog
	dispatched bool
	pool       *Goroutines // the children's, from the first push
	watchdog   *time.Timer
	seen       int64 // calls taken, at the watchdog's last look
}

// healthStripe is the calls queued for one range of entries. Until
// dispatch, pushes append to queue; from then on queue is frozen and the
// workers take queue[next], next++. Its own cache lines.
type healthStripe struct {
	mu         sync.Mutex
	queue      []healthRun
	pool       *Goroutines
	dispatched bool
	next       atomic.Int64
	_          [128 - 8 - 24 - 8 - 8 - 8]byte
}

// setup cuts the queue in stripes for a sweep of entries entries, pending
// of them asked. It is called once, before the queries are sent.
func (r *healthRuns) setup(entries, pending int) {
	w := min(maxWorkers(), pending)
	r.entries = entries
	r.stripes = make([]healthStripe, w)
	for i := range r.stripes {
		r.stripes[i].queue = make([]healthRun, 0, pending/w+1)
	}
}

// maxWorkers is how many workers a sweep runs at once: one per processor
// (two at least, so that one call that hangs does not hold up the rest for
// a healthStall), as the calls are short and never wait on each other.
func maxWorkers() int { return max(runtime.GOMAXPROCS(0), 2) }

// push queues the call of entry index, or runs it on a goroutine of its
// own once the stripe has been dispatched (or the sweep has no such entry).
func (r *healthRuns) push(index int, run healthRun, pool *Goroutines) {
	if index >= 0 && index < r.entries && len(r.stripes) > 0 {
		st := &r.stripes[index*len(r.stripes)/r.entries]
		st.mu.Lock()
		if !st.dispatched {
			st.queue = append(st.queue, run)
			if st.pool == nil {
				st.pool = pool
			}
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
	}
	pool.Go(func() { run.c.runHealth(run.gen) })
}

// dispatch starts the workers on the calls queued so far. Only its first
// call does anything.
func (r *healthRuns) dispatch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dispatched {
		return
	}
	r.dispatched = true
	queued := 0
	for i := range r.stripes {
		st := &r.stripes[i]
		st.mu.Lock()
		st.dispatched = true
		if r.pool == nil {
			r.pool = st.pool
		}
		queued += len(st.queue)
		st.mu.Unlock()
	}
	if queued == 0 {
		return
	}
	r.startWorkers()
	r.watchdog = time.AfterFunc(healthStall, r.watch)
}

// startWorkers starts a worker of the current epoch on each stripe that
// has calls left. r.mu is held.
func (r *healthRuns) startWorkers() {
	epoch := r.epoch.Load()
	for i := range r.stripes {
		if st := &r.stripes[i]; st.next.Load() < int64(len(st.queue)) {
			r.pool.Go(func() { r.work(epoch, i) })
		}
	}
}

// work runs queued calls one after another, from stripe first on, until
// none is left, or the watchdog has retired its epoch.
func (r *healthRuns) work(epoch uint64, first int) {
	for k := range len(r.stripes) {
		st := &r.stripes[(first+k)%len(r.stripes)]
		for r.epoch.Load() == epoch {
			i := st.next.Add(1) - 1
			if i >= int64(len(st.queue)) {
				break
			}
			run := st.queue[i]
			run.c.runHealth(run.gen)
		}
	}
}

// taken is how many calls the workers have taken (a little more: the
// cursors pass their ends), and whether any is left to take. r.mu is held.
func (r *healthRuns) taken() (taken int64, left bool) {
	for i := range r.stripes {
		st := &r.stripes[i]
		next := st.next.Load()
		taken += next
		left = left || next < int64(len(st.queue))
	}
	return taken, left
}

// watch is the watchdog: while calls wait, it looks every healthStall
// whether a worker has taken a call since its last look (which it does only
// once its last call has returned); if none has, it retires the workers and
// starts fresh ones.
func (r *healthRuns) watch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	taken, left := r.taken()
	if !left {
		return // nothing waits: a call still running holds up no other
	}
	if taken == r.seen {
		r.epoch.Add(1)
		r.startWorkers()
	}
	r.seen = taken
	r.watchdog.Reset(healthStall)
}
