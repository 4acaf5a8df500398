package lease

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

var (
	// ErrNotHeld is wrapped by every error of a Term or of a guard: this
	// replica cannot prove, now, that it holds the lease. Match it with
	// errors.Is; the error is a *NotHeldError with the figures.
	ErrNotHeld = errors.New("lease: not held")
	// ErrLost is the cause of a manager stopped because it lost its lease:
	// errors.Is(manager.Err(), lease.ErrLost) tells the host why it stopped.
	// A *NotHeldError of a term that ended lost wraps it too.
	ErrLost = errors.New("lease: lost")
)

// A Term is one hold of a Lease by this replica (lease/shard's elector
// holds one per shard Lease, the single lease being shard 0), and the
// fencing at the write that client-go's leader election does not give: it
// tells, without any API call, whether this replica can prove that it holds
// the Lease at this instant. A worker asks it synchronously just before
// each write (see the root package's GuardTransport), so that a leader that
// was paused (a GC pause, SIGSTOP, a starved node) refuses its first write
// after waking instead of racing its own elector to notice the loss.
//
// The proof: every successful renewal is a write of the Lease naming this
// replica. Another replica starts its expiry clock only when it observes
// that write, which is after it was sent; so, by this replica's clock, the
// lease cannot pass to anybody before
//
//	send time of the last successful renewal + LeaseDuration (whole seconds, as the Lease records it) − margin
//
// The send time is read on the monotonic clock just before the request was
// sent (Elapsed), and published only once the request has succeeded
// (Renewed). The margin covers the difference between the replicas' clock
// rates and the time a write that passed the check takes to be committed.
//
// Its owner reads Elapsed just before sending each write that names this
// replica holder, calls Renewed with that reading once the write has
// succeeded, and End once the hold is over (lost, or about to be released).
// Check and Guard are an atomic load and a clock read, with no lock and no
// allocation when they pass; once the term has ended they fail for ever,
// even when this replica acquires the Lease again under a new Term. A Term
// is safe for concurrent use. A nil *Term holds nothing.
type Term struct {
	clk      clock.PassiveClock
	base     time.Time     // the clock's reading when the term began; sends are offsets from it
	validFor time.Duration // the recorded lease duration less the margin
	lease    string        // the lock's description, for errors
	duration time.Duration // the recorded lease duration, for errors
	margin   time.Duration

	// sent is the offset from base, in nanoseconds, of the send time of the
	// last successful renewal, or neverRenewed, or termEnded.
	sent atomic.Int64
	// why says why the term ended; set before sent becomes termEnded.
	why atomic.Pointer[string]
	// checkFunc is check, made once: Guard hands it to every incarnation.
	checkFunc func() error
}

// The states of a term's sent, besides a send time.
const (
	neverRenewed = math.MinInt64     // no successful write of the lease yet
	termEnded    = math.MinInt64 + 1 // the election is over: for ever not held
)

// Why a term ended.
const (
	reasonLost     = "lost"
	reasonResigned = "resigned"
)

// NewTerm starts a term for the Lease described by lease (namespace/name,
// for errors), whose recorded duration is duration (whole seconds, as the
// Lease records it), on clk. A renewal proves the hold for duration − margin
// after it was sent. It holds nothing until the first Renewed.
func NewTerm(clk clock.PassiveClock, lease string, duration, margin time.Duration) *Term {
	t := &Term{clk: clk, base: clk.Now(), validFor: duration - margin, lease: lease, duration: duration, margin: margin}
	t.sent.Store(neverRenewed)
	t.checkFunc = t.check
	return t
}

// Elapsed is the term's clock reading to pass to Renewed: read it just
// before the write is sent.
func (t *Term) Elapsed() time.Duration { return t.clk.Since(t.base) }

// Renewed publishes a successful write sent at the reading sent. Sends only
// move forward, and never revive an ended term.
func (t *Term) Renewed(sent time.Duration) {
	for {
		old := t.sent.Load()
		if old == termEnded || old >= int64(sent) {
			return
		}
		if t.sent.CompareAndSwap(old, int64(sent)) {
			return
		}
	}
}

// End ends the term: lost says whether the Lease was lost (the guards'
// errors then wrap ErrLost too) rather than given up.
func (t *Term) End(lost bool) {
	if t == nil {
		return
	}
	if lost {
		t.end(reasonLost)
		return
	}
	t.end(reasonResigned)
}

// end ends the term for ever: every guard bound to it fails from now on.
func (t *Term) end(why string) {
	t.why.CompareAndSwap(nil, &why)
	t.sent.Store(termEnded)
}

// Check returns nil while the term proves the hold, else a *NotHeldError.
func (t *Term) Check() error {
	if t == nil {
		return &NotHeldError{Reason: "not acquired"}
	}
	return t.check()
}

// Guard is Check, made once: hand it to what runs under this term.
func (t *Term) Guard() func() error {
	if t == nil {
		return (*Term)(nil).Check
	}
	return t.checkFunc
}

// check is the hot path: one atomic load and one clock read.
func (t *Term) check() error {
	sent := t.sent.Load()
	if sent > termEnded {
		now := t.clk.Since(t.base)
		if int64(now) < sent+int64(t.validFor) {
			return nil
		}
		return t.notHeld(sent, now, "the lease may have expired")
	}
	if sent == neverRenewed {
		return t.notHeld(sent, t.clk.Since(t.base), "not acquired")
	}
	why := "election ended"
	if p := t.why.Load(); p != nil {
		why = *p
	}
	return t.notHeld(sent, t.clk.Since(t.base), why)
}

func (t *Term) notHeld(sent int64, now time.Duration, why string) error {
	e := &NotHeldError{
		Lease: t.lease, Reason: why, Now: t.base.Add(now),
		LeaseDuration: t.duration, Margin: t.margin, lost: why == reasonLost,
	}
	if sent > termEnded {
		e.LastRenewalSent = t.base.Add(time.Duration(sent))
	}
	return e
}

// NotHeldError is the error of a failed check: why this replica cannot
// prove it holds the lease, with the figures. It wraps ErrNotHeld, and
// ErrLost when the election was lost.
type NotHeldError struct {
	Lease           string        // the lock's description (namespace/name)
	Reason          string        // "not acquired", "the lease may have expired", "lost", "resigned", ...
	LastRenewalSent time.Time     // send time of the last successful renewal; zero if none
	Now             time.Time     // when the check ran, on the same clock
	LeaseDuration   time.Duration // as the Lease records it
	Margin          time.Duration // the term's margin for clock-rate skew and write latency
	lost            bool
}

// Error describes the failure with its figures.
func (e *NotHeldError) Error() string {
	s := "lease: not held"
	if e.Lease != "" {
		s += " (" + e.Lease + ")"
	}
	s += ": " + e.Reason
	if !e.LastRenewalSent.IsZero() {
		s += fmt.Sprintf("; last successful renewal sent %s ago, valid for %s (lease %s less margin %s)",
			e.Now.Sub(e.LastRenewalSent), e.LeaseDuration-e.Margin, e.LeaseDuration, e.Margin)
	}
	return s
}

// Unwrap returns ErrNotHeld, and ErrLost when the election was lost.
func (e *NotHeldError) Unwrap() []error {
	if e.lost {
		return []error{ErrNotHeld, ErrLost}
	}
	return []error{ErrNotHeld}
}
