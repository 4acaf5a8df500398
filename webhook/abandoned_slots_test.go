package webhook_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/webhook"
)

// hangingHook is a webhook whose first hangs Handle calls block, ignoring
// their context (a call stuck in a dependency without a deadline), until
// release is closed; the calls after them block until their context ends
// when holdLive is set, else answer at once.
type hangingHook struct {
	*admHook
	hangs    atomic.Int32
	holdLive atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
}

func newHangingHook(t *testing.T, name string, hangs int32) *hangingHook {
	h := &hangingHook{
		admHook: newAdmHook(name, "/"+name),
		entered: make(chan struct{}, 64),
		release: make(chan struct{}),
	}
	h.hangs.Store(hangs)
	h.setHandle(func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		h.entered <- struct{}{}
		if h.hangs.Add(-1) >= 0 {
			<-h.release
		} else if h.holdLive.Load() {
			<-ctx.Done()
		}
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	})
	t.Cleanup(h.free)
	return h
}

// free lets the hung calls return.
func (h *hangingHook) free() { h.once.Do(func() { close(h.release) }) }

// postShort posts a review with the shortest ?timeout= an API server sends.
func (f *admFixture) postShort(t *testing.T, path string, body []byte) admReply {
	t.Helper()
	return admDo(t, f.srv.Client(), "POST", f.srv.URL+path+"?timeout=1s", body)
}

// Handle calls that ignore their context and hang past their requests'
// deadline held their MaxInFlight slots across restarts, for good: every
// later request was refused 429 while the webhook stood Running and
// healthy. Found by a review. Once such calls hold every slot of an
// incarnation it fails (ErrHandlesAbandoned), so that its supervisor
// restarts it, and the new incarnation has a budget of its own. Failed
// calls alone would not restart it here: FailureThreshold is off.
func TestHungHandlesHoldingEverySlotFailTheWebhook(t *testing.T) {
	v1 := admBody(t, admV1)
	h := newHangingHook(t, "hung", 2)
	f := admServe(t, webhook.Config{MaxInFlight: 2, FailureThreshold: -1}, nil, h.admHook)

	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			r := f.postShort(t, "/hung", admWithUID(t, v1, fmt.Sprintf("hung-%d", i)))
			r.wantDenial(t, "admission.k8s.io/v1", fmt.Sprintf("hung-%d", i), 504, "did not answer")
		})
	}
	wg.Wait() // both answered at their deadline; their Handles still run

	var last admReply
	require.Eventually(t, func() bool {
		last = f.postShort(t, "/hung", v1)
		return last.code == 200
	}, admWait, 20*time.Millisecond, "the webhook never served again while hung calls held its slots (last: %d %q)", last.code, last.text)
	last.wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)

	// The abandoned calls were reported, not hidden: the failure that
	// restarted the webhook names them.
	f.events.waitCount(t, cm.ChildFailed, "hung", 1)
	f.events.mu.Lock()
	defer f.events.mu.Unlock()
	for _, e := range f.events.events {
		if e.Type == cm.ChildFailed && e.Child == "hung" {
			require.ErrorIs(t, e.Err, actors.ErrHandlesAbandoned)
			return
		}
	}
}

// A restart gives the webhook a fresh in-flight budget: the calls of the
// incarnation before that outlived their requests (and still run) no
// longer count against MaxInFlight.
func TestRestartGivesAFreshInFlightBudget(t *testing.T) {
	const bound = 3
	v1 := admBody(t, admV1)
	h := newHangingHook(t, "budget", 2)
	f := admServe(t, webhook.Config{MaxInFlight: bound, FailureThreshold: -1}, nil, h.admHook)

	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			r := f.postShort(t, "/budget", admWithUID(t, v1, fmt.Sprintf("hung-%d", i)))
			r.wantDenial(t, "admission.k8s.io/v1", fmt.Sprintf("hung-%d", i), 504, "did not answer")
		})
	}
	wg.Wait()
	require.NoError(t, f.mgr.RestartChild(context.Background(), "budget"))

	// bound calls that hold their slot (until their request ends) all run.
	h.holdLive.Store(true)
	for range 2 {
		<-h.entered // the hung ones
	}
	replies := make(chan admReply, bound)
	for i := range bound {
		go func() { replies <- f.postShort(t, "/budget", admWithUID(t, v1, fmt.Sprintf("live-%d", i))) }()
	}
	deadline := time.NewTimer(admWait)
	defer deadline.Stop()
	for entered := 0; entered < bound; {
		select {
		case <-h.entered:
			entered++
		case r := <-replies:
			t.Fatalf("after the restart a call was answered %d %q before %d ran at once", r.code, r.text, bound)
		case <-deadline.C:
			t.Fatal("the calls never ran")
		}
	}
	for range bound {
		if r := <-replies; r.code != 200 {
			t.Errorf("have %d %q, want a 200 denial at the deadline", r.code, r.text)
		}
	}
}
