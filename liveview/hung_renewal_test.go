package liveview_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/liveview"
)

// A lease check that does not answer costs one goroutine, however often the
// view is read. Found by a hostile read (stop 55): the view called it again
// on every status.json (and every snapshot of every event stream), a
// goroutine each for as long as it hung, where package health, for the
// same check, keeps one call at a time.
func TestAHungLeaseCheckCostsOneGoroutine(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var inFlight, most atomic.Int32
	hung := health.Check("leaderElection", func(*http.Request) error {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release // ignores its context, as a stuck check does
		inFlight.Add(-1)
		return nil
	})
	h := liveview.Handler(checkedSource{newViewSource(t), []health.Checker{hung}}, liveview.WithTimeout(20*time.Millisecond))
	t.Cleanup(h.Close)
	srv := serve(t, h)
	for range 10 {
		if res := get(t, srv, "/debug/supervision/status.json"); res.code != http.StatusOK {
			t.Fatalf("status.json: %d %s", res.code, res.body)
		}
	}
	if n := most.Load(); n > 1 {
		t.Errorf("10 status.json left %d calls of the hung check running at once, want 1", n)
	}
	free()
	eventually(t, "the hung calls to return", func() bool { return inFlight.Load() == 0 })
}
