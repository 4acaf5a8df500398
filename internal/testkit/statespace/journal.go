package statespace

import (
	"fmt"
	"sync"
	"time"
)

// Op is what a journal entry records.
type Op string

// The journaled operations. A start call is Run, Recover or Start,
// whatever the child's kind.
const (
	StartEnter    Op = "start-enter"
	StartExit     Op = "start-exit"
	ShutdownEnter Op = "shutdown-enter"
	ShutdownExit  Op = "shutdown-exit"
)

// Entry is one line of a child's journal.
type Entry struct {
	Seq   uint64 // the journal's order, shared by every child of a sequence
	Time  time.Time
	Child string
	Kind  string
	Op    Op
	Inc   int    // the incarnation: the child's start call number, from 1
	Err   string // a start call's failure, if any
}

func (e Entry) String() string {
	s := fmt.Sprintf("#%d %s %s %s inc %d", e.Seq, e.Time.Format("05.000000"), e.Child, e.Op, e.Inc)
	if e.Err != "" {
		s += " (" + e.Err + ")"
	}
	return s
}

// Incarnation is one start call of a child and what followed it, as the
// child saw it.
type Incarnation struct {
	Child, Kind string
	Inc         int
	From        time.Time // the start call entered
	StartedOK   bool      // the start call returned nil
	StartOpen   bool      // the start call has not returned
	StartEnd    time.Time
	ShutdownIn  bool // Shutdown entered
	ShutdownOut bool // Shutdown returned
	ShutdownEnd time.Time
}

// Active reports whether the incarnation may still hold resources: its
// start call or its Shutdown has not returned, or it has not been shut
// down.
func (in *Incarnation) Active() bool { return in.StartOpen || !in.ShutdownOut }

// End is when the incarnation ended (its start call and its Shutdown both
// returned), or the zero time while it is active.
func (in *Incarnation) End() time.Time {
	if in.Active() {
		return time.Time{}
	}
	if in.StartEnd.After(in.ShutdownEnd) {
		return in.StartEnd
	}
	return in.ShutdownEnd
}

// Journal records, in one order, what every child of a sequence was called
// with, and checks as each entry comes that each child's calls follow the
// contract: start, its return, Shutdown, its return; never a start call
// beside an active incarnation, never a Shutdown beside its start call,
// one Shutdown per start call.
type Journal struct {
	mu       sync.Mutex
	seq      uint64
	entries  []Entry
	incs     map[string][]*Incarnation
	lastCall map[string]time.Time // when each child's last call returned
	open     map[string]int       // each child's calls running
	created  time.Time
	report   func(Violation)
	// handles: each webhook's Handle calls running, by number, with when
	// each began; handled counts them all. Not entries: the checks of
	// start calls and Shutdowns do not count them.
	handles   map[string]map[uint64]time.Time
	handleSeq uint64
	handled   int
}

// HandleDrain is how old a Handle call still running may be when its
// webhook's Shutdown begins without breaking HandleBesideShutdown: a
// stop drains the calls in flight for at most half its ShutdownTimeout
// (ShutdownAndWait: its context, longer) before Shutdown.
const HandleDrain = ShutdownTimeout / 2

// NewJournal returns a journal that reports broken contracts to report.
func NewJournal(report func(Violation)) *Journal {
	return &Journal{incs: map[string][]*Incarnation{}, lastCall: map[string]time.Time{}, open: map[string]int{},
		created: time.Now(), report: report, handles: map[string]map[uint64]time.Time{}}
}

func (j *Journal) add(child, kind string, op Op, inc int, err error) {
	j.addAt(child, kind, op, inc, err, time.Now())
}

// addAt is add of an entry stamped at: a test's history.
func (j *Journal) addAt(child, kind string, op Op, inc int, err error, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	e := Entry{Seq: j.seq, Time: at, Child: child, Kind: kind, Op: op, Inc: inc}
	if err != nil {
		e.Err = err.Error()
	}
	j.entries = append(j.entries, e)
	incs := j.incs[child]
	var cur *Incarnation
	if len(incs) > 0 {
		cur = incs[len(incs)-1]
	}
	switch op {
	case StartEnter, ShutdownEnter:
		j.open[child]++
	default:
		j.open[child]--
		j.lastCall[child] = e.Time
	}
	switch op {
	case StartEnter:
		if cur != nil && cur.Active() {
			what := "has not been shut down"
			switch {
			case cur.StartOpen:
				what = "is still in its start call"
			case cur.ShutdownIn:
				what = "is still in its Shutdown"
			}
			j.violate(TwoIncarnations, e, "incarnation %d starts while incarnation %d %s", inc, cur.Inc, what)
		}
		j.incs[child] = append(incs, &Incarnation{Child: child, Kind: kind, Inc: inc, From: e.Time, StartOpen: true})
	case StartExit:
		in := j.find(child, inc)
		if in == nil {
			return
		}
		in.StartOpen, in.StartEnd, in.StartedOK = false, e.Time, err == nil
		if in.ShutdownOut && err == nil {
			j.violate(StartAfterShutdown, e, "incarnation %d's start call returned nil after its Shutdown had returned: what it started is never stopped", inc)
		}
	case ShutdownEnter:
		for _, began := range j.handles[child] {
			if age := e.Time.Sub(began); age < HandleDrain {
				j.violate(HandleBesideShutdown, e, "Shutdown began while a Handle call begun %s before still ran", age.Round(time.Microsecond))
				break
			}
		}
		switch {
		case cur == nil:
			j.violate(ShutdownBesideStart, e, "Shutdown before the child's first start call was even entered")
		case cur.ShutdownIn:
			j.violate(ShutdownTwice, e, "a second Shutdown for incarnation %d (or one before the next start call)", cur.Inc)
		case cur.StartOpen:
			cur.ShutdownIn = true
			j.violate(ShutdownBesideStart, e, "Shutdown of incarnation %d runs while its start call has not returned", cur.Inc)
		default:
			cur.ShutdownIn = true
		}
	case ShutdownExit:
		if cur != nil && cur.ShutdownIn && !cur.ShutdownOut {
			cur.ShutdownOut, cur.ShutdownEnd = true, e.Time
		}
	}
}

// handleEnter records the beginning of a Handle call of webhook child,
// and checks that an incarnation of it is serving; the number it returns
// is handleExit's.
func (j *Journal) handleEnter(child, kind string) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	j.handleSeq++
	j.handled++
	id := j.handleSeq
	if j.handles[child] == nil {
		j.handles[child] = map[uint64]time.Time{}
	}
	j.handles[child][id] = now
	e := Entry{Seq: j.seq, Time: now, Child: child, Kind: kind, Op: "handle"}
	incs := j.incs[child]
	if len(incs) == 0 {
		j.violate(HandleOutside, e, "Handle before the webhook's first Start")
		return id
	}
	switch cur := incs[len(incs)-1]; {
	case cur.StartOpen:
		j.violate(HandleOutside, e, "Handle while incarnation %d's Start has not returned", cur.Inc)
	case !cur.StartedOK:
		j.violate(HandleOutside, e, "Handle after incarnation %d's Start failed", cur.Inc)
	case cur.ShutdownIn:
		j.violate(HandleOutside, e, "Handle after incarnation %d's Shutdown began", cur.Inc)
	}
	return id
}

// handleExit records the end of Handle call id of webhook child.
func (j *Journal) handleExit(child string, id uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.handles[child], id)
}

// Handled is how many Handle calls the journal has judged.
func (j *Journal) Handled() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.handled
}

func (j *Journal) find(child string, inc int) *Incarnation {
	for _, in := range j.incs[child] {
		if in.Inc == inc {
			return in
		}
	}
	return nil
}

func (j *Journal) violate(inv Invariant, e Entry, format string, args ...any) {
	if j.report != nil {
		j.report(Violation{Invariant: inv, Child: e.Child, Time: e.Time, Detail: fmt.Sprintf("%s: ", e) + fmt.Sprintf(format, args...)})
	}
}

// Incarnations returns a copy of every incarnation of every child.
func (j *Journal) Incarnations() []Incarnation {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Incarnation
	for _, incs := range j.incs {
		for _, in := range incs {
			out = append(out, *in)
		}
	}
	return out
}

// Of returns a copy of child's incarnations.
func (j *Journal) Of(child string) []Incarnation {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Incarnation, len(j.incs[child]))
	for i, in := range j.incs[child] {
		out[i] = *in
	}
	return out
}

// Idle reports how long child has had no call running (zero while one
// runs); a child never called counts from the journal's creation.
func (j *Journal) Idle(child string, now time.Time) (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.open[child] > 0 {
		return 0, false
	}
	last, ok := j.lastCall[child]
	if !ok {
		last = j.created
	}
	return now.Sub(last), true
}

// IdleWithin is Idle for a group: how long no call of any child inside
// group (at any depth) has been running; one never called counts from
// the journal's creation.
func (j *Journal) IdleWithin(group string, now time.Time) (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	last := j.created
	for child, n := range j.open {
		if !within(child, group) {
			continue
		}
		if n > 0 {
			return 0, false
		}
		if t := j.lastCall[child]; t.After(last) {
			last = t
		}
	}
	return now.Sub(last), true
}

// Entries returns a copy of the journal.
func (j *Journal) Entries() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Entry(nil), j.entries...)
}

// Tail returns child's last n entries, for violation messages.
func (j *Journal) Tail(child string, n int) []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Entry
	for i := len(j.entries) - 1; i >= 0 && len(out) < n; i-- {
		if j.entries[i].Child == child {
			out = append(out, j.entries[i])
		}
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}
