package e2e

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// interval is one incarnation of one controller of one replica, active from its start
// to its end. An interval still open when it is checked ends at the replica's death when
// it was SIGKILLed, and never otherwise.
type interval struct {
	replica, controller string
	incarnation         int
	from, to            time.Time
}

// forever ends an interval that is still open.
var forever = time.Unix(0, math.MaxInt64)

func (iv interval) String() string {
	to := "open"
	if iv.to != forever {
		to = iv.to.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%s/%s#%d %s–%s", iv.replica, iv.controller, iv.incarnation, iv.from.Format("15:04:05.000000"), to)
}

// intervals extracts the active intervals of r's controllers. Narrow ones run from
// Running (Run is returning nil) to ShutdownCalled, which is the task's definition of
// "active"; wide ones from RunCalled to Stopped (Shutdown is returning), which also
// covers a controller that is starting or stopping.
func intervals(r *replica, entries []journal.Entry) (narrow, wide []interval) {
	type key struct {
		controller string
		n          int
	}
	open := func(m map[key]*interval, k key, at time.Time) {
		m[k] = &interval{replica: r.id, controller: k.controller, incarnation: k.n, from: at, to: forever}
	}
	narrowOpen, wideOpen := map[key]*interval{}, map[key]*interval{}
	closeIv := func(m map[key]*interval, k key, at time.Time, into *[]interval) {
		if iv, ok := m[k]; ok {
			iv.to = at
			*into = append(*into, *iv)
			delete(m, k)
		}
	}
	for _, e := range entries {
		k := key{e.Controller, e.Incarnation}
		switch e.Kind {
		case journal.RunCalled:
			open(wideOpen, k, e.At())
		case journal.Running:
			open(narrowOpen, k, e.At())
		case journal.ShutdownCalled:
			closeIv(narrowOpen, k, e.At(), &narrow)
		case journal.Stopped:
			closeIv(wideOpen, k, e.At(), &wide)
		}
	}
	end := forever
	if !r.killedAt.IsZero() {
		end = r.killedAt
	}
	for _, iv := range narrowOpen {
		iv.to = end
		narrow = append(narrow, *iv)
	}
	for _, iv := range wideOpen {
		iv.to = end
		wide = append(wide, *iv)
	}
	return narrow, wide
}

// checkNoOverlap fails t for every pair of intervals of two different replicas that
// overlap at all, for both definitions of an interval, and returns the smallest gap
// seen between two replicas' intervals (how close they came).
func checkNoOverlap(t *testing.T, rs []*replica) time.Duration {
	t.Helper()
	var narrow, wide []interval
	for _, r := range rs {
		n, w := intervals(r, r.entries(t))
		narrow = append(narrow, n...)
		wide = append(wide, w...)
	}
	minGap := time.Duration(math.MaxInt64)
	for _, set := range []struct {
		name string
		ivs  []interval
	}{{"running → Shutdown called", narrow}, {"Run called → Shutdown returned", wide}} {
		for i, x := range set.ivs {
			for _, y := range set.ivs[i+1:] {
				if x.replica == y.replica {
					continue
				}
				if x.from.Before(y.to) && y.from.Before(x.to) {
					t.Errorf("active intervals (%s) overlap: %s and %s", set.name, x, y)
					continue
				}
				gap := y.from.Sub(x.to)
				if x.from.After(y.from) {
					gap = x.from.Sub(y.to)
				}
				minGap = min(minGap, gap)
			}
		}
	}
	if len(narrow) == 0 {
		t.Error("no controller was ever active: nothing was checked")
	}
	return minGap
}
