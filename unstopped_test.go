package controllermanager_test

import (
	"bytes"
	"context"

	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// hangInShutdown is where the hung children of these tests are stuck: the
// report must show this frame.
//
//go:noinline
func hangInShutdown(release <-chan struct{}) { <-release }

// hungWebhook is a webhook whose Shutdown ignores its context.
type hungWebhook struct {
	*testchild.Webhook
	release <-chan struct{}
}

func (w hungWebhook) Shutdown(ctx context.Context) {
	w.Webhook.Shutdown(ctx)
	hangInShutdown(w.release)
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// shutdownWithin calls ShutdownAndWait with a context that ends after d and
// returns how long after that deadline it returned.
func shutdownWithin(m interface{ ShutdownAndWait(context.Context) }, d time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	m.ShutdownAndWait(ctx)
	return time.Since(deadline)
}

func TestShutdownAndWaitReportsUnstopped(t *testing.T) {
	release := make(chan struct{})
	var logs syncBuffer
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	events := record(m)
	fine := testchild.NewController("fine", testchild.Behavior{})
	stuck := testchild.NewController("stuck", testchild.Behavior{Shutdown: func(context.Context, int) { hangInShutdown(release) }})
	hook := hungWebhook{Webhook: testchild.NewWebhook("hook", "/hook", nil, nil), release: release}
	store := testchild.NewStore("store", nil)
	m.Add(fine, stuck, hook)
	m.AddStore(store)
	require.NoError(t, m.Start(context.Background(), 0))

	const deadline = 300 * time.Millisecond
	over := shutdownWithin(m, deadline)
	t.Logf("ShutdownAndWait returned %s after its deadline", over)
	assert.Less(t, over, time.Second, "ShutdownAndWait must return at its deadline (the bound is deadline + 50ms; generous here for loaded machines)")
	select {
	case <-m.Done():
		t.Fatal("the manager must not stop while Shutdown calls have not returned")
	default:
	}

	err = m.Err()
	require.ErrorIs(t, err, cm.ErrUnstopped)
	var uerr *cm.UnstoppedError
	require.ErrorAs(t, err, &uerr)
	var names []string
	for _, u := range uerr.Children {
		names = append(names, u.Name)
		assert.GreaterOrEqual(t, u.For, deadline-50*time.Millisecond, "%s: how long its Shutdown ran", u.Name)
		assert.Positive(t, u.Goroutine, u.Name)
		assert.Contains(t, u.Stack, "controllermanager_test.hangInShutdown", "%s: the stack where it is stuck", u.Name)
		assert.Contains(t, u.Stack, fmt.Sprintf("goroutine %d [", u.Goroutine))
	}
	sort.Strings(names)
	assert.Equal(t, []string{"hook", "stuck"}, names, "exactly the children still in Shutdown")
	assert.Contains(t, err.Error(), `controller "stuck" (Shutdown running for`)
	assert.Contains(t, err.Error(), `webhook "hook"`)

	require.True(t, testchild.Eventually(wait, func() bool { return events.count(cm.ChildUnstopped, "") == 2 }))
	for _, e := range events.snapshot() {
		if e.Type == cm.ChildUnstopped {
			require.ErrorAs(t, e.Err, &uerr)
			require.Len(t, uerr.Children, 1)
			assert.Equal(t, e.Child, uerr.Children[0].Name)
			assert.Equal(t, cm.PhaseShuttingDown, e.Phase)
		}
	}
	out := logs.String()
	assert.Contains(t, out, "child did not stop")
	assert.Contains(t, out, "child=stuck")
	assert.Contains(t, out, "hangInShutdown")

	close(release)
	<-m.Done()
	m.ShutdownAndWait(context.Background()) // waits for the subscribers
	assert.ErrorIs(t, m.Err(), cm.ErrUnstopped, "the overrun is still reported once everything has stopped")
	for _, c := range []*testchild.Controller{fine, stuck} {
		runs, shutdowns, _ := c.Counts()
		assert.Equal(t, runs, shutdowns, c.Name())
	}
}

// A Shutdown already running when ShutdownAndWait is called (StopChild's,
// a restart's) is reported too, although ShutdownAndWait did not call it.
func TestShutdownAndWaitReportsShutdownsAlreadyRunning(t *testing.T) {
	release := make(chan struct{})
	m := newManager(t, nil, nil)
	stuck := testchild.NewController("stuck", testchild.Behavior{Shutdown: func(context.Context, int) { hangInShutdown(release) }})
	m.Add(stuck, testchild.NewController("fine", testchild.Behavior{}))
	require.NoError(t, m.Start(context.Background(), 0))
	m.Send(supervisor.StopChild{Name: "stuck"})
	require.True(t, testchild.Eventually(wait, func() bool {
		c, _ := mustStatus(t, m).Child("stuck")
		return c.State == supervisor.StateStopping
	}))

	over := shutdownWithin(m, 200*time.Millisecond)
	t.Logf("ShutdownAndWait returned %s after its deadline", over)
	assert.Less(t, over, time.Second)
	var uerr *cm.UnstoppedError
	require.ErrorAs(t, m.Err(), &uerr)
	require.Len(t, uerr.Children, 1)
	assert.Equal(t, "stuck", uerr.Children[0].Name)
	assert.Contains(t, uerr.Children[0].Stack, "hangInShutdown")

	// A second ShutdownAndWait that gives up reports it again.
	over = shutdownWithin(m, 100*time.Millisecond)
	assert.Less(t, over, time.Second)
	require.ErrorAs(t, m.Err(), &uerr)
	require.Len(t, uerr.Children, 1)
	close(release)
	<-m.Done()
}

// TestShutdownBound measures how long after its deadline ShutdownAndWait
// returns on a manager of 1,000 controllers of which 10 hang in Shutdown:
// the report takes a dump of every goroutine's stack.
func TestShutdownBound(t *testing.T) {
	n, rounds := 1000, 3
	if testing.Short() {
		n, rounds = 200, 1
	}
	var overs []time.Duration
	for round := range rounds {
		release := make(chan struct{})
		m := newManager(t, nil, nil)
		for i := range n {
			b := testchild.Behavior{}
			if i%(n/10) == 0 {
				b.Shutdown = func(context.Context, int) { hangInShutdown(release) }
			}
			m.Add(testchild.NewController(fmt.Sprintf("c%04d", i), b))
		}
		require.NoError(t, m.Start(context.Background(), 0))
		// Long enough for the 990 Shutdowns that return at once to have
		// returned on a loaded machine (200ms was not, on 2 shared cores),
		// so that exactly the hung ones are reported; the bound measured is
		// how late ShutdownAndWait returns after its deadline.
		over := shutdownWithin(m, 2*time.Second)
		overs = append(overs, over)
		var uerr *cm.UnstoppedError
		require.ErrorAs(t, m.Err(), &uerr, "round %d", round)
		assert.Len(t, uerr.Children, 10)
		for _, u := range uerr.Children {
			assert.Contains(t, u.Stack, "hangInShutdown", u.Name)
		}
		close(release)
		<-m.Done()
	}
	slices.Sort(overs)
	t.Logf("ShutdownAndWait returned after its deadline by: %v (median %s, max %s)", overs, overs[len(overs)/2], overs[len(overs)-1])
	assert.Less(t, overs[len(overs)-1], time.Second)
}

// Err is the UnstoppedError from the moment a ShutdownAndWait that overran
// returns, on every run (issue 23: nil in 6 of 20 runs). Two controllers,
// one whose Shutdown outlasts the context: 50ms, or a context that has ended
// already, which gives up before the supervisor has handed out the Stops
// (nil in 16 of 20 runs before the fix).
func TestErrIsUnstoppedAsShutdownAndWaitReturns(t *testing.T) {
	for _, deadline := range []time.Duration{50 * time.Millisecond, 0} {
		t.Run(deadline.String(), func(t *testing.T) {
			release := make(chan struct{})
			m := newManager(t, nil, nil)
			m.Add(testchild.NewController("fine", testchild.Behavior{}),
				testchild.NewController("slow", testchild.Behavior{Shutdown: func(context.Context, int) { hangInShutdown(release) }}))
			require.NoError(t, m.Start(context.Background(), 0))
			defer func() {
				close(release)
				<-m.Done()
			}()

			shutdownWithin(m, deadline)
			err := m.Err()
			require.ErrorIs(t, err, cm.ErrUnstopped, "read as ShutdownAndWait returns")
			var uerr *cm.UnstoppedError
			require.ErrorAs(t, err, &uerr)
			var slow []cm.Unstopped
			for _, u := range uerr.Children {
				if u.Name == "slow" {
					slow = append(slow, u)
					continue
				}
				// Only a child not stopped yet may be named beside it: not
				// handed its Stop yet (no call), or in a Shutdown that had
				// not returned when the context ended (a context ended
				// already races the fine controller's quick Shutdown: seen
				// once in a loaded run, in it for 18µs).
				assert.Equal(t, "fine", u.Name)
				assert.EqualValues(t, "controller", u.Kind)
				assert.Contains(t, []string{"", "Shutdown"}, u.Call, "fine's call")
			}
			require.Len(t, slow, 1, "the child still in Shutdown, once: %v", err)
			if deadline > 0 {
				assert.Equal(t, "Shutdown", slow[0].Call)
				assert.Contains(t, slow[0].Stack, "hangInShutdown")
			}
		})
	}
}

// A ShutdownAndWait that overruns during the manager's own start, while a
// controller's Run ignores its context, reports the Run that Shutdown waits
// for; run under -race, the report reads the call only after the child has
// set everything it carries (issue 23: a data race on the call's waitsFor).
//
// The report names the Run only once the child has taken its Stop, and
// nothing bounds when it does: on a starved machine the context can end
// first, and the report then rightly lists the child as not stopped yet
// (no Call, no goroutine), and "fine" beside it when its quick Shutdown
// (or its Stop) came after the context's end too (both seen in 3 of 800
// loaded runs). So each report is held to what it may say, and the test
// asks again, a ShutdownAndWait at a time (each sends the Stop again with
// its own watch), until the Stop has been taken and the report names the
// Run: it waits for that event, not for an interval. Each ask's deadline
// doubles (50ms to 1.6s), so that a supervisor slower than the first one
// still takes a Stop within a later one.
func TestUnstoppedDuringStartReportsTheRun(t *testing.T) {
	release, running := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	// Deferred, so that it runs before newManager's cleanup, whose
	// ShutdownAndWait would otherwise wait its whole bound for this Run.
	defer unblock()
	m := newManager(t, nil, nil)
	m.Add(testchild.NewController("fine", testchild.Behavior{}),
		testchild.NewController("deaf", testchild.Behavior{Run: func(context.Context, int) error {
			close(running)
			<-release // ignores its context
			return nil
		}}))
	started := make(chan error, 1)
	go func() { started <- m.Start(context.Background(), 0) }()
	<-running

	var deaf cm.Unstopped
	reports, deadline := 0, 50*time.Millisecond
	named := testchild.Eventually(wait, func() bool {
		reports++
		shutdownWithin(m, deadline)
		deadline = min(2*deadline, 1600*time.Millisecond)
		var uerr *cm.UnstoppedError
		require.ErrorAs(t, m.Err(), &uerr, "report %d", reports)
		deaf = cm.Unstopped{}
		for _, u := range uerr.Children {
			switch u.Name {
			case "deaf":
				require.Empty(t, deaf.Name, "deaf listed twice in report %d: %v", reports, uerr)
				deaf = u
				// Its Stop not taken yet (no call), or taken: then the
				// start call its Shutdown waits for, never that Shutdown.
				require.Contains(t, []string{"", "Run"}, u.Call, "report %d: %v", reports, uerr)
			case "fine":
				// Not stopped yet, or in a Shutdown that had not returned
				// when the context ended.
				require.Contains(t, []string{"", "Shutdown"}, u.Call, "report %d: %v", reports, uerr)
			default:
				t.Fatalf("report %d names %q: %v", reports, u.Name, uerr)
			}
		}
		require.Equal(t, "deaf", deaf.Name, "deaf is in every report %d: %v", reports, uerr)
		return deaf.Call == "Run"
	})
	t.Logf("the Run named by report %d", reports)
	require.True(t, named, "no report named deaf's Run in %d reports", reports)
	assert.Positive(t, deaf.Goroutine)
	assert.Contains(t, deaf.Stack, fmt.Sprintf("goroutine %d [", deaf.Goroutine))
	assert.Contains(t, deaf.Stack, "TestUnstoppedDuringStartReportsTheRun", "the stack of the Run, where it ignores its context")

	unblock()
	require.Error(t, <-started, "a Start ended by a shutdown fails")
	<-m.Done()
}
