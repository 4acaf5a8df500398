package controllermanager_test

import (
	"bytes"
	"context"

	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
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
// report must show this frame. entered, if not nil, is called from inside
// it (its frame is on the stack from then on) before it blocks.
//
//go:noinline
func hangInShutdown(release <-chan struct{}, entered func()) {
	if entered != nil {
		entered()
	}
	<-release
}

// assertStuckIn checks the stack reported for u, a call of a ShutdownAndWait
// asked at asked with a deadline d. The stack is taken no earlier than
// halfway to the deadline (the watch's early dump, else the report's), so
// it shows hangInShutdown when the call had entered it by then (entered
// holds when, by name); a Shutdown starved until later may be found
// before that frame, and then its stack is still its Shutdown's, or not
// found at all when its goroutine had not begun the call (Goroutine 0).
func assertStuckIn(t *testing.T, u cm.Unstopped, entered *sync.Map, asked time.Time, d time.Duration) {
	t.Helper()
	at, ok := entered.Load(u.Name)
	early := ok && !at.(time.Time).After(asked.Add(d/2))
	if u.Goroutine == 0 && !early {
		t.Logf("%s: its Shutdown's goroutine had not begun the call when the stacks were taken", u.Name)
		assert.Empty(t, u.Stack, u.Name)
		return
	}
	assert.Positive(t, u.Goroutine, u.Name)
	assert.Contains(t, u.Stack, fmt.Sprintf("goroutine %d [", u.Goroutine), u.Name)
	if early {
		assert.Contains(t, u.Stack, "controllermanager_test.hangInShutdown", "%s: the stack where it is stuck", u.Name)
		return
	}
	t.Logf("%s entered its hang after half the deadline: its stack is its Shutdown's, where it was", u.Name)
	assert.Contains(t, u.Stack, "childactor.(*child).runShutdown", "%s: the stack of its Shutdown", u.Name)
}

// hungWebhook is a webhook whose Shutdown ignores its context.
type hungWebhook struct {
	*testchild.Webhook
	release <-chan struct{}
	entered func() // called, if set, as its Shutdown begins to hang (hangInShutdown)
}

func (w hungWebhook) Shutdown(ctx context.Context) {
	w.Webhook.Shutdown(ctx)
	hangInShutdown(w.release, w.entered)
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
	// When each hung Shutdown began to hang, by name: its call began no
	// later, so it had run at least from then to the deadline.
	var entered sync.Map
	fine := testchild.NewController("fine", testchild.Behavior{})
	stuck := testchild.NewController("stuck", testchild.Behavior{Shutdown: func(context.Context, int) {
		hangInShutdown(release, func() { entered.Store("stuck", time.Now()) })
	}})
	hook := hungWebhook{Webhook: testchild.NewWebhook("hook", "/hook", nil, nil), release: release,
		entered: func() { entered.Store("hook", time.Now()) }}
	store := testchild.NewStore("store", nil)
	m.Add(fine, stuck, hook)
	m.AddStore(store)
	require.NoError(t, m.Start(context.Background(), 0))

	const deadline = 300 * time.Millisecond
	asked := time.Now()
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
	reported := uerr.Children
	for _, u := range uerr.Children {
		names = append(names, u.Name)
		// Its Shutdown ran at least from the moment it began to hang to
		// the deadline (the report comes after it). Not the whole
		// deadline: nothing bounds when a starved supervisor hands out the
		// Stops (For was 202ms of a 300ms deadline in a loaded run).
		if at, ok := entered.Load(u.Name); ok {
			assert.GreaterOrEqual(t, u.For, asked.Add(deadline).Sub(at.(time.Time)), "%s: how long its Shutdown ran", u.Name)
		}
		assert.Positive(t, u.For, "%s: how long its Shutdown ran", u.Name)
		assertStuckIn(t, u, &entered, asked, deadline)
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
	for _, u := range reported {
		assert.Contains(t, out, fmt.Sprintf("goroutine=%d", u.Goroutine), "%s: the log names its goroutine", u.Name)
		if strings.Contains(u.Stack, "hangInShutdown") {
			assert.Contains(t, out, "hangInShutdown", "%s: the log holds its stack", u.Name)
		}
	}

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
	stuck := testchild.NewController("stuck", testchild.Behavior{Shutdown: func(context.Context, int) { hangInShutdown(release, nil) }})
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
				b.Shutdown = func(context.Context, int) { hangInShutdown(release, nil) }
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
			var entered sync.Map
			m := newManager(t, nil, nil)
			m.Add(testchild.NewController("fine", testchild.Behavior{}),
				testchild.NewController("slow", testchild.Behavior{Shutdown: func(context.Context, int) {
					hangInShutdown(release, func() { entered.Store("slow", time.Now()) })
				}}))
			require.NoError(t, m.Start(context.Background(), 0))
			defer func() {
				close(release)
				<-m.Done()
			}()

			asked := time.Now()
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
			switch {
			case slow[0].Call == "":
				// Its Stop taken after the context's end (seen once in
				// 50 runs beside 3 busy loops): not stopped yet, which the
				// rule counts as overrun all the same.
				assert.Zero(t, slow[0].Goroutine)
			case deadline > 0:
				assert.Equal(t, "Shutdown", slow[0].Call)
				// Seen once without hangInShutdown (-cpu 1, 3 busy loops):
				// the Shutdown was still runnable in testchild's Shutdown.
				assertStuckIn(t, slow[0], &entered, asked, deadline)
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
