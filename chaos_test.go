package controllermanager_test

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/chaos"
)

var (
	chaosFor  = flag.Duration("chaos.for", 0, "how long TestChaos injects faults (default 12s; 3s with -short)")
	chaosSeed = flag.Uint64("chaos.seed", 0, "the seed of TestChaos's random choices (default: from the time)")
)

// TestChaos runs 1,000 children (controllers, stores and webhooks serving
// real AdmissionReviews over HTTP) under random faults and lifecycle
// messages, checking every event as it comes (see package chaos), then
// settles the tree and compares the books: events, Status, metrics and
// the children's own records. It ends with a child that escalates while
// others hang in Shutdown: ShutdownAndWait returns at its deadline and
// names them, and once they are released every start call has had exactly
// one Shutdown and no goroutine is left. It runs for 12s by default
// (-chaos.for=10m for a long run; 3s with -short).
func TestChaos(t *testing.T) {
	d := 12 * time.Second
	if testing.Short() {
		d = 3 * time.Second
	}
	if *chaosFor > 0 {
		d = *chaosFor
	}
	leftBefore := goleak.IgnoreCurrent()
	h, err := chaos.New(chaos.Config{
		Controllers: 600, Stores: 150, Webhooks: 250,
		FaultRate: 150, LifecycleRate: 25, AdmissionClients: 8,
		Seed: *chaosSeed,
	})
	require.NoError(t, err)
	t.Logf("seed %d (-chaos.seed to replay the choices; the timing differs)", h.Seed())
	m := h.Manager()
	t.Cleanup(h.Close)

	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	begin := time.Now()
	require.NoError(t, h.Start(ctx))
	t.Logf("1,000 children started in %s", time.Since(begin).Round(time.Millisecond))
	h.Run(ctx, d)
	settleCtx, cancelSettle := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelSettle()
	require.NoError(t, h.Settle(settleCtx))
	require.NoError(t, h.Verify(ctx))
	t.Logf("after %s of chaos:\n%s", d, h.Snapshot())

	// The end: a child spends its restart budget while five others will
	// hang in their Shutdown, whatever its context says.
	held := h.HoldShutdowns(5)
	reckless, err := h.Escalate(ctx)
	require.NoError(t, err)
	over := shutdownWithin(m, time.Second)
	t.Logf("ShutdownAndWait with 5 children hung among %d returned %s after its deadline", 1000, over)
	assert.Less(t, over, time.Second, "ShutdownAndWait must return at its deadline (+50ms; generous here for loaded machines)")
	var uerr *cm.UnstoppedError
	require.ErrorAs(t, m.Err(), &uerr)
	var unstopped []string
	for _, u := range uerr.Children {
		unstopped = append(unstopped, u.Name)
		if slices.Contains(held, u.Name) {
			assert.Contains(t, u.Stack, "chaos.hangInShutdown", u.Name)
		}
	}
	slices.Sort(unstopped)
	assert.Equal(t, held, unstopped, "the unstopped report names exactly the children hung in Shutdown")

	h.Release()
	<-m.Done()
	m.ShutdownAndWait(ctx) // waits for the subscribers, the checker among them
	var eerr *cm.EscalationError
	require.ErrorAs(t, m.Err(), &eerr)
	assert.Equal(t, reckless, eerr.Child)
	assert.ErrorIs(t, m.Err(), cm.ErrUnstopped)
	h.Final()
	h.Close()

	snap := h.Snapshot()
	made, _ := h.Children()
	t.Logf("in the end, %d children made in all:\n%s", made, snap)
	violations, n := h.Violations()
	for _, v := range violations {
		t.Error(v)
	}
	assert.Zero(t, n, "invariants broken")
	assert.Positive(t, snap.Failures)
	assert.Positive(t, snap.Restarts)
	assert.Equal(t, snap.MustRegistered-snap.MustTouched, snap.MustResolved, "every reported failure nothing else touched was counted")
	goleak.VerifyNone(t, leftBefore)
}
