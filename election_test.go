package controllermanager_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/pausewatch"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// Leader election through the public API, on leasetest's fake API server
// (which refuses stale resourceVersions with 409 Conflict, as the real one
// does), each replica a manager of its own in this process. The timing is
// the issue's: a 2s lease, a 1s renew deadline, a 100ms retry period, so
// the fence budget is 2s − 1s − 100ms = 900ms and the fence timeout 720ms.
// client-go runs on the real clock: these tests take real seconds, and run
// in parallel.

const (
	elLeaseDuration = 2 * time.Second
	elRenewDeadline = time.Second
	elRetryPeriod   = 100 * time.Millisecond
	elFenceBudget   = 900 * time.Millisecond
	elFenceTimeout  = 720 * time.Millisecond
	elNamespace     = "ns"
	elLeaseName     = "controllers"
	elWait          = 10 * time.Second // bound on anything that should happen promptly
)

var elQuiet = cm.WithLogger(slog.New(slog.DiscardHandler))

func elSpec(onLost cm.LeaseLostAction) *cm.LeaderElectionSpec {
	yes := true
	return &cm.LeaderElectionSpec{
		Enabled: &yes, LeaseName: elLeaseName, LeaseNamespace: elNamespace,
		LeaseDuration: metav1.Duration{Duration: elLeaseDuration},
		RenewDeadline: metav1.Duration{Duration: elRenewDeadline},
		RetryPeriod:   metav1.Duration{Duration: elRetryPeriod},
		OnLeaseLost:   onLost,
	}
}

// elActivity records when each replica's controllers and stores were
// active: from their Run (Recover) call to the return of their Shutdown.
// Two replicas' spans must never overlap.
//
// It also watches for pauses of the whole test process (a ticker that does
// not tick: CPU starvation on a loaded machine). The replicas share the
// process, so such a pause stops the leader and delays the standby alike,
// and when it ends the standby's clock says the lease has expired while the
// leader has not yet noticed its loss: the paused-process limit that
// docs/leader-election.md sets out, which no lease can fence. An overlap
// that such a pause explains is logged, not failed.
type elActivity struct {
	mu     sync.Mutex
	spans  []*elSpan
	pauses *pausewatch.Watch
}

// newElActivity returns an activity log whose pause watch ends with t.
func newElActivity(t *testing.T) *elActivity {
	a := &elActivity{pauses: pausewatch.Start()}
	t.Cleanup(a.pauses.Stop)
	return a
}

type elSpan struct {
	replica, child string
	from, to       time.Time // to is zero while active
}

func (a *elActivity) begin(replica, child string) *elSpan {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &elSpan{replica: replica, child: child, from: time.Now()}
	a.spans = append(a.spans, s)
	return s
}

func (a *elActivity) end(s *elSpan) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.to = time.Now()
}

// active counts replica's controllers and stores active now.
func (a *elActivity) active(replica string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.spans {
		if s.replica == replica && s.to.IsZero() {
			n++
		}
	}
	return n
}

func (a *elActivity) snapshot() []elSpan {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]elSpan, len(a.spans))
	for i, s := range a.spans {
		out[i] = *s
	}
	return out
}

// assertNoOverlap fails if spans of two replicas overlap: the fence. A
// pause of the process longer than half the fence budget excuses them.
func (a *elActivity) assertNoOverlap(t *testing.T) {
	t.Helper()
	pause := a.pauses.Longest()
	report := t.Errorf
	if pause > elFenceBudget/2 {
		t.Logf("the test process was paused for %s (fence budget %s): overlaps are logged, not failed", pause, elFenceBudget)
		report = t.Logf
	}
	a.overlaps(func(x, y elSpan) bool { return true }, func(x, y elSpan, xEnd, yEnd time.Time) {
		report("%s/%s active %s–%s overlaps %s/%s active %s–%s", x.replica, x.child, x.from.Format("05.000"),
			xEnd.Format("05.000"), y.replica, y.child, y.from.Format("05.000"), yEnd.Format("05.000"))
	})
}

// overlaps calls found for every two spans of different replicas that
// overlap in time and that match (a span still open ends an hour from now).
func (a *elActivity) overlaps(match func(x, y elSpan) bool, found func(x, y elSpan, xEnd, yEnd time.Time)) {
	spans := a.snapshot()
	end := func(s elSpan) time.Time {
		if s.to.IsZero() {
			return time.Now().Add(time.Hour)
		}
		return s.to
	}
	for i, x := range spans {
		for _, y := range spans[i+1:] {
			if x.replica != y.replica && match(x, y) && x.from.Before(end(y)) && y.from.Before(end(x)) {
				found(x, y, end(x), end(y))
			}
		}
	}
}

// subscribe records every event of m in e, and returns e.
func (e *elEvents) subscribe(m *cm.ControllerManager) *elEvents {
	m.Subscribe(func(ev cm.Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	})
	return e
}

// lastEnd is when the last of replica's spans ended; firstBegin when its
// first span began after since.
func (a *elActivity) lastEnd(replica string) time.Time {
	var last time.Time
	for _, s := range a.snapshot() {
		if s.replica == replica && s.to.After(last) {
			last = s.to
		}
	}
	return last
}

func (a *elActivity) firstBegin(replica string, since time.Time) time.Time {
	var first time.Time
	for _, s := range a.snapshot() {
		if s.replica == replica && s.from.After(since) && (first.IsZero() || s.from.Before(first)) {
			first = s.from
		}
	}
	return first
}

// elController is a controller that records its activity. run and
// shutdown, when set, replace the default behaviour (start at once, stop at
// once); n counts the calls from 1.
type elController struct {
	replica, name string
	activity      *elActivity

	mu        sync.Mutex
	span      *elSpan
	runs      int
	shutdowns int
	run       func(ctx context.Context, n int) error
	shutdown  func(ctx context.Context)
}

func (c *elController) Name() string { return c.name }
func (c *elController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

func (c *elController) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runs++
	n, run := c.runs, c.run
	if c.span == nil {
		c.span = c.activity.begin(c.replica, c.name)
	}
	c.mu.Unlock()
	if run != nil {
		return run(ctx, n)
	}
	return nil
}

func (c *elController) Shutdown(ctx context.Context) {
	c.mu.Lock()
	shutdown := c.shutdown
	c.mu.Unlock()
	if shutdown != nil {
		shutdown(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shutdowns++
	if c.span != nil {
		c.activity.end(c.span)
		c.span = nil
	}
}

func (c *elController) counts() (runs, shutdowns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.shutdowns
}

func (c *elController) set(run func(context.Context, int) error, shutdown func(context.Context)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.run, c.shutdown = run, shutdown
}

// elStore is a store that records its activity, from Recover to Shutdown.
// (It is not a Controller: it has no Run nor GetHealth.)
type elStore struct {
	c elController
}

func (s *elStore) Name() string                      { return s.c.name }
func (s *elStore) Recover(ctx context.Context) error { return s.c.Run(ctx) }
func (s *elStore) Shutdown(ctx context.Context)      { s.c.Shutdown(ctx) }

// elWebhook is a webhook that counts its starts and shutdowns: it must keep
// serving on a standby.
type elWebhook struct {
	mu               sync.Mutex
	starts, shutdown int
}

func (w *elWebhook) Name() string { return "hook" }
func (w *elWebhook) Path() string { return "/hook" }
func (w *elWebhook) Ready() bool  { return true }
func (w *elWebhook) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.starts++
	return nil
}
func (w *elWebhook) Shutdown(context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.shutdown++
}
func (w *elWebhook) Handle(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{Allowed: true}, nil
}
func (w *elWebhook) counts() (starts, shutdowns int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts, w.shutdown
}

// elEvents collects a manager's events.
type elEvents struct {
	mu     sync.Mutex
	events []cm.Event
}

func (e *elEvents) all() []cm.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

func (e *elEvents) count(typ cm.EventType) int {
	n := 0
	for _, ev := range e.all() {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// losses counts the LeaderLost and ShardLost events.
func (e *elEvents) losses() int { return e.count(cm.LeaderLost) + e.count(cm.ShardLost) }

// nth waits for the n-th event of typ (from 1) and returns it.
func (e *elEvents) nth(t *testing.T, typ cm.EventType, n int) cm.Event {
	t.Helper()
	var found cm.Event
	elEventually(t, fmt.Sprintf("%d %s events", n, typ), func() bool {
		seen := 0
		for _, ev := range e.all() {
			if ev.Type == typ {
				if seen++; seen == n {
					found = ev
					return true
				}
			}
		}
		return false
	})
	return found
}

// elReplica is one manager with two controllers, a store and a webhook.
type elReplica struct {
	id        string
	m         *cm.ControllerManager
	client    *leasetest.Client
	ctrls     []*elController
	store     *elStore
	webhook   *elWebhook
	events    *elEvents
	started   chan error // Start's result
	startedAt time.Time  // when Start returned
}

func newElReplica(t *testing.T, srv *leasetest.Server, id string, onLost cm.LeaseLostAction, activity *elActivity, opts ...cm.Option) *elReplica {
	t.Helper()
	r := &elReplica{id: id, client: srv.Client(id), webhook: &elWebhook{}, events: &elEvents{}, started: make(chan error, 1)}
	m, err := cm.NewControllerManager(cm.NewContext(r.client), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(onLost)}, "",
		append([]cm.Option{cm.WithIdentity(id), elQuiet}, opts...)...)
	require.NoError(t, err)
	r.m = m
	r.events.subscribe(m)
	r.store = &elStore{c: elController{replica: id, name: "store", activity: activity}}
	for _, name := range []string{"ctrl-1", "ctrl-2"} {
		r.ctrls = append(r.ctrls, &elController{replica: id, name: name, activity: activity})
	}
	m.AddStore(r.store)
	m.Add(r.ctrls[0], r.ctrls[1], r.webhook)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return r
}

// start calls Start in a goroutine: it blocks until elected.
func (r *elReplica) start() {
	go func() {
		err := r.m.Start(context.Background(), 0)
		r.startedAt = time.Now()
		r.started <- err
	}()
}

func (r *elReplica) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.started:
		require.NoError(t, err, "%s: Start", r.id)
	case <-time.After(elWait):
		t.Fatalf("%s: not started within %s", r.id, elWait)
	}
}

func (r *elReplica) status(t *testing.T) cm.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	st, err := r.m.Status(ctx)
	require.NoError(t, err)
	return st
}

// elEventually polls cond every 5ms until it holds, failing after elWait.
func elEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	elEventuallyWithin(t, elWait, what, cond)
}

// elEventuallyWithin fails unless cond holds within wait.
func elEventuallyWithin(t *testing.T, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("not within %s: %s", wait, what)
		}
	}
}

// elConsistently fails if cond stops holding within d.
func elConsistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if _, lapsed := lapse(d, cond); lapsed {
		t.Fatalf("no longer true: %s", what)
	}
}

// lapse polls cond every 5ms for d, and reports how long after the start
// it first no longer held, if it did.
func lapse(d time.Duration, cond func() bool) (after time.Duration, lapsed bool) {
	start := time.Now()
	deadline := time.After(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if !cond() {
			return time.Since(start), true
		}
		select {
		case <-tick.C:
		case <-deadline:
			return 0, false
		}
	}
}

// A standby is ready, shows who leads, and starts nothing; the leader's
// ShutdownAndWait gives the lease up only after every controller has
// returned from Shutdown, and the standby takes over within about a retry
// period.
func TestElectionHandover(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := newElReplica(t, srv, "a", cm.LeaseLostExit, activity)
	a.start()
	a.waitStarted(t)
	b := newElReplica(t, srv, "b", cm.LeaseLostExit, activity)
	b.start()

	elEventually(t, "b sees a lead", func() bool { return b.status(t).LeaderIdentity == "a" })
	st := b.status(t)
	assert.Equal(t, cm.PhaseElecting, st.Phase)
	assert.False(t, st.Leader)
	assert.Equal(t, "b", st.Identity)
	assert.NoError(t, b.m.GetReadiness(), "a standby is ready")
	assert.False(t, b.m.IsStarting())
	assert.Empty(t, b.m.GetHealth(), "not elected is not unhealthy")
	starts, _ := b.webhook.counts()
	assert.Equal(t, 1, starts, "a standby serves its webhooks")
	st = a.status(t)
	assert.True(t, st.Leader)
	assert.Equal(t, "a", st.Identity)
	assert.Equal(t, "a", st.LeaderIdentity)
	a.events.nth(t, cm.LeaderElected, 1) // delivered to the subscriber after Start returned
	assert.Equal(t, 1, a.events.count(cm.LeaderElected))
	assert.Equal(t, 0, b.events.count(cm.LeaderElected))

	// a's first controller holds its Shutdown until we let it go.
	inShutdown, letGo := make(chan struct{}), make(chan struct{})
	a.ctrls[0].set(nil, func(context.Context) { close(inShutdown); <-letGo })
	returned := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		a.m.ShutdownAndWait(ctx)
		returned <- time.Now()
	}()
	select {
	case <-inShutdown:
	case <-time.After(elWait):
		// a lost its lease first (a starved renewal) and shut its
		// controllers down before the hook was set: say so, not hang.
		t.Fatalf("a's first controller's Shutdown not called within %s; a: %+v", elWait, a.status(t))
	}
	elConsistently(t, 5*elRetryPeriod, "a keeps the lease while a controller is shutting down", func() bool {
		return srv.Holder(elNamespace, elLeaseName) == "a" && !b.m.IsStarting()
	})
	close(letGo)
	var returnedAt time.Time
	select {
	case returnedAt = <-returned:
	case <-time.After(2 * elWait):
		t.Fatalf("a's ShutdownAndWait did not return within %s", 2*elWait)
	}
	b.waitStarted(t)

	var releasedAt time.Time
	for _, w := range srv.History() {
		if w.Client == "a" && w.Holder == "" {
			releasedAt = w.Time
		}
	}
	require.False(t, releasedAt.IsZero(), "a released the lease: %+v", srv.History())
	aStopped := activity.lastEnd("a")
	assert.True(t, releasedAt.After(aStopped), "released %s after the last Shutdown returned %s",
		releasedAt.Format("05.000"), aStopped.Format("05.000"))
	bRunning := b.startedAt
	t.Logf("handover: a's last Shutdown returned → lease released %s → b's controllers running %s; a's ShutdownAndWait returned → b running %s",
		releasedAt.Sub(aStopped), bRunning.Sub(releasedAt), bRunning.Sub(returnedAt))
	// client-go retries every retry period with up to 120% jitter; an
	// expired lease would take a lease duration.
	assert.Less(t, bRunning.Sub(releasedAt), elLeaseDuration/2, "b takes over within about a retry period")
	assert.NoError(t, a.m.Err(), "a requested shutdown is not a failure")
	assert.True(t, b.status(t).Leader)
	activity.assertNoOverlap(t)
}

// Three replicas hand the lease on twice; only one leads at any time.
func TestElectionThreeReplicas(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	replicas := map[string]*elReplica{}
	for _, id := range []string{"a", "b", "c"} {
		replicas[id] = newElReplica(t, srv, id, cm.LeaseLostExit, activity)
		replicas[id].start()
	}
	var order []string
	for round := range 3 {
		var leader *elReplica
		elEventually(t, "one replica leads", func() bool {
			for _, r := range replicas {
				if r.m.IsStarted() {
					leader = r
					return true
				}
			}
			return false
		})
		leader.waitStarted(t)
		for id, r := range replicas {
			if r != leader {
				st := r.status(t)
				assert.False(t, st.Leader, "%s leads with %s in round %d", id, leader.id, round)
				assert.False(t, r.m.IsStarting(), id)
			}
		}
		order = append(order, leader.id)
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		leader.m.ShutdownAndWait(ctx)
		cancel()
		require.NoError(t, leader.m.Err())
		delete(replicas, leader.id)
	}
	t.Logf("leaders in turn: %v", order)
	activity.assertNoOverlap(t)
}

// A lease taken over behind the leader's back: the leader's renewals are
// refused (409), it fences every controller within the fence timeout, well
// before the standby may take the lease, and (OnLeaseLost: Exit) stops
// with lease.ErrLost.
func TestElectionStolenLeaseIsFenced(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := newElReplica(t, srv, "a", "", activity) // "" is Exit
	a.start()
	a.waitStarted(t)
	b := newElReplica(t, srv, "b", cm.LeaseLostExit, activity)
	b.start()
	elEventually(t, "b sees a lead", func() bool { return b.status(t).LeaderIdentity == "a" })
	// One controller takes a while to stop, as long as its context allows.
	a.ctrls[1].set(nil, func(ctx context.Context) {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	})

	stolenAt := time.Now()
	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", elLeaseDuration))
	select {
	case <-a.m.Done():
	case <-time.After(elWait):
		t.Fatal("a did not stop")
	}
	require.ErrorIs(t, a.m.Err(), lease.ErrLost)
	lost := a.events.nth(t, cm.LeaderLost, 1)
	assert.ErrorIs(t, lost.Err, lease.ErrLost)
	fencedAt := activity.lastEnd("a")
	_, webhookShutdowns := a.webhook.counts()
	assert.Equal(t, 1, webhookShutdowns, "Exit shuts the whole manager down")

	b.waitStarted(t)
	bBegan := activity.firstBegin("b", stolenAt)
	t.Logf("fencing: stolen → Lost %s; Lost → last Shutdown returned %s (timeout %s); fenced → b's first controller %s",
		lost.Time.Sub(stolenAt), fencedAt.Sub(lost.Time), elFenceTimeout, bBegan.Sub(fencedAt))
	assert.Less(t, fencedAt.Sub(lost.Time), elFenceTimeout)
	assert.True(t, fencedAt.Before(bBegan))
	assert.Equal(t, "b", srv.Holder(elNamespace, elLeaseName))
	activity.assertNoOverlap(t)
}

// OnLeaseLost: Reelect. A partitioned leader fences its controllers and
// stores and goes back to Electing, its webhook still serving; once
// reconnected it stands by, and when the new leader leaves it recovers its
// store and runs its controllers afresh, in the same process.
func TestElectionReelect(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := newElReplica(t, srv, "a", cm.LeaseLostReelect, activity)
	a.start()
	a.waitStarted(t)
	b := newElReplica(t, srv, "b", cm.LeaseLostReelect, activity)
	b.start()
	elEventually(t, "b sees a lead", func() bool { return b.status(t).LeaderIdentity == "a" })

	a.client.Partition(true)
	lost := a.events.nth(t, cm.LeaderLost, 1)
	elEventually(t, "a fences", func() bool {
		st := a.status(t)
		for _, c := range st.Children {
			if c.Kind != "webhook" && c.State != "Stopped" {
				return false
			}
		}
		return st.Phase == cm.PhaseElecting
	})
	fencedAt := activity.lastEnd("a")
	t.Logf("reelect fencing: Lost → last Shutdown returned %s", fencedAt.Sub(lost.Time))
	assert.Less(t, fencedAt.Sub(lost.Time), elFenceTimeout)
	assert.NoError(t, a.m.GetReadiness(), "a fenced replica is a ready standby")
	assert.False(t, a.m.IsStarting())
	assert.Empty(t, a.m.GetHealth())
	select {
	case <-a.m.Done():
		t.Fatal("Reelect does not stop the manager")
	default:
	}
	starts, shutdowns := a.webhook.counts()
	assert.Equal(t, [2]int{1, 0}, [2]int{starts, shutdowns}, "the webhook keeps serving")

	b.waitStarted(t)
	a.client.Partition(false)
	elEventually(t, "a stands by behind b", func() bool { return a.status(t).LeaderIdentity == "b" })
	assert.Equal(t, cm.PhaseElecting, a.status(t).Phase)

	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	b.m.ShutdownAndWait(ctx)
	cancel()
	a.events.nth(t, cm.LeaderElected, 2)
	elEventually(t, "a runs again", func() bool { return a.m.IsStarted() && a.status(t).Phase == cm.PhaseRunning })
	for _, c := range append([]*elController{&a.store.c}, a.ctrls...) {
		runs, shutdowns := c.counts()
		assert.Equal(t, [2]int{2, 1}, [2]int{runs, shutdowns}, "%s started afresh", c.name)
	}
	starts, shutdowns = a.webhook.counts()
	assert.Equal(t, [2]int{1, 0}, [2]int{starts, shutdowns}, "the webhook was never restarted")
	assert.Len(t, a.m.GetHealth(), 2)
	assert.True(t, a.status(t).Leader)
	assert.NoError(t, a.m.Err())
	activity.assertNoOverlap(t)
	if t.Failed() {
		t.Logf("a lost at %s", lost.Time.Format("05.000000"))
		for _, w := range srv.History() {
			t.Logf("write %s %s by %s rv %s", w.Time.Format("05.000000"), w.Holder, w.Client, w.Version)
		}
	}
}

// A lease lost while the controllers are still starting aborts the start:
// with Exit, Start fails with lease.ErrLost; with Reelect, Start waits for
// the next election and then succeeds.
func TestElectionLostWhileStarting(t *testing.T) {
	for _, onLost := range []cm.LeaseLostAction{cm.LeaseLostExit, cm.LeaseLostReelect} {
		t.Run(string(onLost), func(t *testing.T) {
			t.Parallel()
			srv, activity := leasetest.NewServer(), newElActivity(t)
			a := newElReplica(t, srv, "a", onLost, activity)
			running := make(chan struct{})
			a.ctrls[0].set(func(ctx context.Context, n int) error {
				if n > 1 {
					return nil
				}
				close(running)
				<-ctx.Done() // a start that hangs until cancelled
				return ctx.Err()
			}, nil)
			a.start()
			<-running
			assert.Equal(t, cm.PhaseStarting, a.status(t).Phase)
			a.client.Partition(true)
			a.events.nth(t, cm.LeaderLost, 1)

			if onLost == cm.LeaseLostExit {
				select {
				case err := <-a.started:
					require.ErrorIs(t, err, lease.ErrLost)
				case <-time.After(elWait):
					t.Fatal("Start did not return")
				}
				<-a.m.Done()
				assert.ErrorIs(t, a.m.Err(), lease.ErrLost)
				runs, shutdowns := a.ctrls[0].counts()
				assert.Equal(t, [2]int{1, 1}, [2]int{runs, shutdowns})
				return
			}
			elEventually(t, "a fences", func() bool {
				_, shutdowns := a.ctrls[0].counts()
				return shutdowns == 1
			})
			select {
			case err := <-a.started:
				t.Fatalf("Start returned %v while the lease is lost", err)
			default:
			}
			a.client.Partition(false)
			a.waitStarted(t)
			runs, shutdowns := a.ctrls[0].counts()
			assert.Equal(t, [2]int{2, 1}, [2]int{runs, shutdowns})
			// Start returns once the manager is Running; the subscriber is told of
			// the election after that, on a goroutine of its own: wait for it.
			a.events.nth(t, cm.LeaderElected, 2)
			assert.Equal(t, 2, a.events.count(cm.LeaderElected))
			assert.True(t, a.m.IsStarted())
		})
	}
}

// A controller whose Shutdown ignores its context cannot be fenced: at the
// fence timeout the manager stops anyway, with an error that says so, so
// that the host exits, even with Reelect.
func TestElectionFenceTimeoutStopsTheManager(t *testing.T) {
	t.Parallel()
	srv, activity := leasetest.NewServer(), newElActivity(t)
	a := newElReplica(t, srv, "a", cm.LeaseLostReelect, activity)
	stuck := make(chan struct{})
	defer close(stuck)
	a.ctrls[1].set(nil, func(context.Context) { <-stuck })
	a.start()
	a.waitStarted(t)

	a.client.Partition(true)
	lost := a.events.nth(t, cm.LeaderLost, 1)
	select {
	case <-a.m.Done():
	case <-time.After(elWait):
		t.Fatal("a did not stop")
	}
	stoppedAfter := time.Since(lost.Time)
	err := a.m.Err()
	require.ErrorIs(t, err, lease.ErrLost)
	assert.Contains(t, err.Error(), `not fenced: controller "ctrl-2" did not return from Shutdown within 720ms`)
	assert.GreaterOrEqual(t, stoppedAfter, elFenceTimeout)
	assert.Less(t, stoppedAfter, elFenceTimeout+time.Second)
}

func TestElectionLeaseWatchdog(t *testing.T) {
	t.Parallel()
	off, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	assert.Nil(t, off.LeaseWatchdog(), "nil when election is off")
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	off.ShutdownAndWait(ctx)

	r := newElReplica(t, leasetest.NewServer(), "a", "", newElActivity(t))
	w := r.m.LeaseWatchdog()
	require.NotNil(t, w)
	assert.Equal(t, "leaderElection", w.Name())
	r.start()
	r.waitStarted(t)
	assert.NoError(t, w.Check(nil), "a leader renewing its lease is healthy")
}

func TestElectionValidation(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	d := func(v time.Duration) metav1.Duration { return metav1.Duration{Duration: v} }
	client := leasetest.NewServer().Client("a")
	valid := func(mod func(*cm.LeaderElectionSpec)) cm.ControllerManagerConfigSpec {
		spec := elSpec("")
		mod(spec)
		return cm.ControllerManagerConfigSpec{LeaderElection: spec}
	}
	tests := []struct {
		name string
		cfg  cm.ControllerManagerConfigSpec
		ctx  cm.Context
		want []string // each must appear; none means valid
	}{{
		name: "valid",
		cfg:  valid(func(*cm.LeaderElectionSpec) {}),
	}, {
		name: "off: nothing is checked",
		cfg:  cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{Enabled: &no, LeaseDuration: d(-1)}},
		ctx:  cm.NewContext(nil),
	}, {
		name: "defaults",
		cfg:  cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{Enabled: &yes, LeaseName: "x"}},
	}, {
		name: "negative durations",
		cfg: valid(func(s *cm.LeaderElectionSpec) {
			s.LeaseDuration, s.RenewDeadline, s.RetryPeriod = d(-time.Second), d(-time.Second), d(-time.Second)
		}),
		want: []string{"leaderElection.leaseDuration: must not be negative, got -1s",
			"leaderElection.renewDeadline: must not be negative", "leaderElection.retryPeriod: must not be negative"},
	}, {
		name: "lease not longer than renew deadline",
		cfg:  valid(func(s *cm.LeaderElectionSpec) { s.LeaseDuration, s.RenewDeadline = d(time.Second), d(time.Second) }),
		want: []string{"leaderElection.leaseDuration: 1s must be greater than leaderElection.renewDeadline 1s"},
	}, {
		name: "renew deadline not longer than 1.2 retry periods",
		cfg: valid(func(s *cm.LeaderElectionSpec) {
			s.RenewDeadline, s.RetryPeriod = d(1200*time.Millisecond), d(time.Second)
		}),
		want: []string{"leaderElection.renewDeadline: 1.2s must be greater than 1.2 × leaderElection.retryPeriod 1s"},
	}, {
		name: "no time to fence",
		cfg: valid(func(s *cm.LeaderElectionSpec) {
			s.LeaseDuration, s.RenewDeadline, s.RetryPeriod = d(3*time.Second), d(2*time.Second), d(time.Second)
		}),
		want: []string{"leaderElection.leaseDuration: 3s leaves no time to fence a lost lease"},
	}, {
		name: "lease duration in fractions of a second",
		cfg:  valid(func(s *cm.LeaderElectionSpec) { s.LeaseDuration = d(2500 * time.Millisecond) }),
		want: []string{"leaderElection.leaseDuration: must be a whole number of seconds"},
	}, {
		name: "no lease name",
		cfg:  valid(func(s *cm.LeaderElectionSpec) { s.LeaseName = "" }),
		want: []string{"leaderElection.leaseName: required"},
	}, {
		name: "invalid lease name and namespace",
		cfg:  valid(func(s *cm.LeaderElectionSpec) { s.LeaseName, s.LeaseNamespace = "Not_A_Name", "not.a.label" }),
		want: []string{`leaderElection.leaseName: "Not_A_Name" is not a valid Kubernetes name`,
			`leaderElection.leaseNamespace: "not.a.label" is not a valid namespace`},
	}, {
		name: "unknown onLeaseLost",
		cfg:  valid(func(s *cm.LeaderElectionSpec) { s.OnLeaseLost = "Retry" }),
		want: []string{`leaderElection.onLeaseLost: "Retry" is not one of Exit, Reelect`},
	}, {
		name: "no clientset",
		cfg:  valid(func(*cm.LeaderElectionSpec) {}),
		ctx:  cm.NewContext(nil),
		want: []string{"leaderElection.enabled: leader election needs a Kubernetes clientset"},
	}, {
		name: "every problem at once",
		cfg: cm.ControllerManagerConfigSpec{
			LeaderElection: &cm.LeaderElectionSpec{Enabled: &yes, LeaseNamespace: "Bad", RetryPeriod: d(-1), OnLeaseLost: "Never",
				LeaseDuration: d(time.Second), RenewDeadline: d(2 * time.Second)},
			Supervision: &cm.SupervisionSpec{MaxRestarts: -1},
		},
		ctx: cm.NewContext(nil),
		want: []string{"leaderElection.leaseName", "leaderElection.leaseNamespace", "leaderElection.retryPeriod",
			"leaderElection.leaseDuration", "leaderElection.onLeaseLost", "leaderElection.enabled", "supervision.maxRestarts"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = cm.NewContext(client)
			}
			m, err := cm.NewControllerManager(ctx, tt.cfg, "", elQuiet)
			if len(tt.want) == 0 {
				require.NoError(t, err)
				sctx, cancel := context.WithTimeout(context.Background(), elWait)
				defer cancel()
				m.ShutdownAndWait(sctx)
				return
			}
			require.Error(t, err)
			assert.Nil(t, m)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}
