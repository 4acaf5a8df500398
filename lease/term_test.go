package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/lease"
)

// TestTerm checks a hold's proof as a table of steps on a fake clock: a
// renewal proves the hold for duration − margin after it was sent, a
// renewal sent earlier never moves the proof back, and an ended term fails
// for ever, wrapping ErrLost only when it was lost.
func TestTerm(t *testing.T) {
	const duration, margin = 10 * time.Second, 2 * time.Second
	for _, tt := range []struct {
		name    string
		steps   func(clk *clocktesting.FakeClock, term *lease.Term)
		held    bool
		lost    bool
		because string
	}{
		{"never renewed", func(*clocktesting.FakeClock, *lease.Term) {}, false, false, "not acquired"},
		{"renewed", func(clk *clocktesting.FakeClock, term *lease.Term) {
			term.Renewed(term.Elapsed())
			clk.Step(duration - margin - time.Nanosecond)
		}, true, false, ""},
		{"past duration less margin", func(clk *clocktesting.FakeClock, term *lease.Term) {
			term.Renewed(term.Elapsed())
			clk.Step(duration - margin)
		}, false, false, "the lease may have expired"},
		{"an older send does not move the proof back", func(clk *clocktesting.FakeClock, term *lease.Term) {
			old := term.Elapsed()
			clk.Step(time.Second)
			term.Renewed(term.Elapsed())
			term.Renewed(old)
			clk.Step(duration - margin - time.Nanosecond)
		}, true, false, ""},
		{"lost", func(_ *clocktesting.FakeClock, term *lease.Term) {
			term.Renewed(term.Elapsed())
			term.End(true)
		}, false, true, "lost"},
		{"resigned, then renewed: ended for ever", func(_ *clocktesting.FakeClock, term *lease.Term) {
			term.Renewed(term.Elapsed())
			term.End(false)
			term.Renewed(term.Elapsed())
		}, false, false, "resigned"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
			term := lease.NewTerm(clk, "default/lease", duration, margin)
			guard := term.Guard()
			tt.steps(clk, term)
			for _, err := range []error{term.Check(), guard()} {
				if tt.held {
					assert.NoError(t, err)
					continue
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, lease.ErrNotHeld)
				assert.Equal(t, tt.lost, errors.Is(err, lease.ErrLost))
				var nh *lease.NotHeldError
				require.ErrorAs(t, err, &nh)
				assert.Equal(t, tt.because, nh.Reason)
				assert.Equal(t, "default/lease", nh.Lease)
			}
		})
	}
	var none *lease.Term
	assert.ErrorIs(t, none.Check(), lease.ErrNotHeld)
	assert.ErrorIs(t, none.Guard()(), lease.ErrNotHeld)
}

// TestWatchdog checks that the check's error wraps ErrRenewalOverdue, that a
// nil Watchdog passes, and that the grace defaults.
func TestWatchdog(t *testing.T) {
	var grace time.Duration
	overdue := lease.NewWatchdogFor(0, func(g time.Duration) error { grace = g; return errors.New("shard 3 not renewed") })
	err := overdue.Check(nil)
	assert.ErrorIs(t, err, lease.ErrRenewalOverdue)
	assert.Contains(t, err.Error(), "shard 3 not renewed")
	assert.Equal(t, lease.DefaultWatchdogGrace, grace)
	assert.NoError(t, lease.NewWatchdogFor(time.Second, func(time.Duration) error { return nil }).Check(nil))
	assert.NoError(t, (*lease.Watchdog)(nil).Check(nil))
	assert.Equal(t, "leaderElection", overdue.Name())
}

// BenchmarkTermCheck is the cost of the check every guarded write makes
// (a Term's Guard, on the real clock), held: an atomic load and a clock
// read, no allocation.
func BenchmarkTermCheck(b *testing.B) {
	term := lease.NewTerm(clock.RealClock{}, "ns/lease", time.Hour, time.Second)
	term.Renewed(term.Elapsed())
	guard := term.Guard()
	b.ReportAllocs()
	for b.Loop() {
		if err := guard(); err != nil {
			b.Fatal(err)
		}
	}
}
