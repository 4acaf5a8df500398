package controllermanager_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// The guard's bound at the election tests' timing: the 2s lease less the
// default margin, fence budget 900ms − fence timeout 720ms.
const guardValid = elLeaseDuration - (elFenceBudget - elFenceTimeout)

// stallLock is a lease lock whose writes can be held back, as a frozen
// process's renewals are.
type stallLock struct {
	resourcelock.Interface
	mu      sync.Mutex
	stalled chan struct{}
}

func (l *stallLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	ch := l.stalled
	l.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return l.Interface.Update(ctx, ler)
}

func (l *stallLock) stall() (unstall func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.stalled = ch
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.stalled = nil
			l.mu.Unlock()
			close(ch)
		})
	}
}

// guardedController keeps the lease guard of each incarnation its Run
// received.
type guardedController struct {
	mu     sync.Mutex
	guards []func() error
	ok     bool
}

func (c *guardedController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "guarded", Healthy: true}
}

func (c *guardedController) Run(ctx context.Context) error {
	guard, ok := cm.LeaseGuard(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.guards = append(c.guards, guard)
	c.ok = ok
	return nil
}

func (c *guardedController) Shutdown(context.Context) {}

func (c *guardedController) guard(t *testing.T, i int) func() error {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.True(t, c.ok, "LeaseGuard's ok")
	require.Greater(t, len(c.guards), i)
	return c.guards[i]
}

// guardedWebhook keeps the ok of the LeaseGuard of its Start context.
type guardedWebhook struct{ ok atomic.Bool }

func (w *guardedWebhook) Name() string { return "hook" }
func (w *guardedWebhook) Path() string { return "/hook" }
func (w *guardedWebhook) Ready() bool  { return true }
func (w *guardedWebhook) Start(ctx context.Context) error {
	_, ok := cm.LeaseGuard(ctx)
	w.ok.Store(ok)
	return nil
}
func (w *guardedWebhook) Shutdown(context.Context) {}
func (w *guardedWebhook) Handle(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{Allowed: true}, nil
}

// guardedManager is an elected manager on leasetest whose guard reads clk.
func guardedManager(t *testing.T, clk *clocktesting.FakeClock) (*cm.ControllerManager, *guardedController, *stallLock, *elEvents) {
	t.Helper()
	srv := leasetest.NewServer()
	inner, err := lease.NewLeaseLock(srv.Client("a"), elNamespace, elLeaseName, "a")
	require.NoError(t, err)
	lock := &stallLock{Interface: inner}
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "",
		cm.WithLeaseLock(lock), cm.WithClock(clk), elQuiet)
	require.NoError(t, err)
	events := (&elEvents{}).subscribe(m)
	c := &guardedController{}
	m.Add(c)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	require.ErrorIs(t, m.LeaseGuard(), lease.ErrNotHeld, "before the election")
	require.NoError(t, m.Start(t.Context(), 0))
	return m, c, lock, events
}

// A pause of the whole process, as its guard sees it: no renewal gets
// through, and the clock moves on. The elector runs on the same (injected)
// clock: past the renew deadline it gives the lease up, and past the
// guard's bound the guard fails by itself, with no message needed, at the
// very read that comes after the step.
func TestLeaseGuardFailsAPausePastTheBound(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	m, c, lock, events := guardedManager(t, clk)
	guard := c.guard(t, 0)
	require.NoError(t, guard())
	require.NoError(t, m.LeaseGuard())

	unstall := lock.stall()
	defer unstall()
	clk.Step(elRetryPeriod)
	require.NoError(t, guard(), "within the renew deadline and the bound")
	clk.Step(guardValid - elRetryPeriod)
	err := guard()
	require.ErrorIs(t, err, lease.ErrNotHeld, "the read right after the step fails")
	require.ErrorIs(t, m.LeaseGuard(), lease.ErrNotHeld)

	// Renewals resume, too late: the lease is lost and the incarnation's
	// guard stays failed.
	unstall()
	elEventually(t, "the loss", func() bool { return events.count(cm.LeaderLost) > 0 })
	require.ErrorIs(t, guard(), lease.ErrNotHeld)
	select {
	case <-m.Done():
	case <-time.After(elWait):
		st, err := m.Status(t.Context())
		t.Fatalf("with Exit the manager did not stop after the loss: %+v %v; events %v", st, err, events.all())
	}
	require.ErrorIs(t, m.Err(), lease.ErrLost)
}

func TestLeaseGuardFailsAfterShutdown(t *testing.T) {
	t.Parallel()
	m, c, _, _ := guardedManager(t, clocktesting.NewFakeClock(time.Unix(1_000_000, 0)))
	guard := c.guard(t, 0)
	require.NoError(t, guard(), "it outlives Run")
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	m.ShutdownAndWait(ctx)
	err := guard()
	require.ErrorIs(t, err, lease.ErrNotHeld)
	assert.Contains(t, err.Error(), "shut down")
	require.ErrorIs(t, m.LeaseGuard(), lease.ErrNotHeld)
}

func TestLeaseGuardWithElectionOff(t *testing.T) {
	t.Parallel()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	c, hook := &guardedController{}, &guardedWebhook{}
	m.Add(c, hook)
	require.NoError(t, m.LeaseGuard(), "no lease to prove")
	require.NoError(t, m.Start(t.Context(), 0))
	guard := c.guard(t, 0)
	require.NoError(t, guard())
	assert.False(t, hook.ok.Load(), "a webhook does not run under the lease")

	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	m.ShutdownAndWait(ctx)
	require.ErrorIs(t, guard(), lease.ErrNotHeld, "the incarnation is over")
	require.ErrorIs(t, m.LeaseGuard(), lease.ErrNotHeld, "the manager has stopped")
}

func TestLeaseGuardOutsideAManager(t *testing.T) {
	guard, ok := cm.LeaseGuard(context.Background())
	assert.False(t, ok)
	require.ErrorIs(t, guard(), lease.ErrNotHeld, "fails closed")
}

func TestLeaseGuardRestartedIncarnation(t *testing.T) {
	t.Parallel()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	c := &guardedController{}
	m.Add(c)
	require.NoError(t, m.Start(t.Context(), 0))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	first := c.guard(t, 0)
	_, err = m.Request(t.Context(), supervisor.RestartChild{Name: "guarded"})
	require.NoError(t, err)
	elEventually(t, "the second incarnation runs", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.guards) == 2
	})
	require.ErrorIs(t, first(), lease.ErrNotHeld, "the first incarnation has been shut down")
	require.NoError(t, c.guard(t, 1)())
}

// countingServer answers every request with an empty ConfigMap and counts
// what reached it.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// closeTracker is a request body that records whether it was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeTracker) Close() error { b.closed.Store(true); return nil }

func TestGuardTransport(t *testing.T) {
	srv, reached := countingServer(t)
	notHeld := errors.New("not held, for this test")
	for _, tt := range []struct {
		method  string
		guard   func() error
		refused bool
	}{
		{http.MethodGet, func() error { return notHeld }, false},
		{http.MethodHead, func() error { return notHeld }, false},
		{http.MethodOptions, func() error { return notHeld }, false},
		{http.MethodPost, func() error { return notHeld }, true},
		{http.MethodPut, func() error { return notHeld }, true},
		{http.MethodPatch, func() error { return notHeld }, true},
		{http.MethodDelete, func() error { return notHeld }, true},
		{http.MethodPost, func() error { return nil }, false},
		{http.MethodDelete, func() error { return nil }, false},
		{http.MethodPatch, nil, true},
	} {
		t.Run(tt.method, func(t *testing.T) {
			before := reached.Load()
			body := &closeTracker{Reader: strings.NewReader("{}")}
			req, err := http.NewRequest(tt.method, srv.URL+"/api/v1/namespaces/ns/configmaps", body)
			require.NoError(t, err)
			resp, err := (&http.Client{Transport: cm.GuardTransport(tt.guard, nil)}).Do(req)
			if !tt.refused {
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, before+1, reached.Load(), "sent")
				return
			}
			require.Error(t, err)
			if tt.guard == nil {
				require.ErrorIs(t, err, lease.ErrNotHeld)
			} else {
				require.ErrorIs(t, err, notHeld)
			}
			assert.Contains(t, err.Error(), tt.method+" /api/v1/namespaces/ns/configmaps refused by the lease guard")
			assert.Equal(t, before, reached.Load(), "never sent")
			assert.True(t, body.closed.Load(), "the body is closed, as a RoundTripper must")
		})
	}
}

// BenchmarkLeaseGuard is a controller's guard on the real clock, its
// manager elected and renewing meanwhile: the cost of one check per write.
func BenchmarkLeaseGuard(b *testing.B) {
	srv := leasetest.NewServer()
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")), cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "",
		cm.WithIdentity("a"), elQuiet)
	require.NoError(b, err)
	c := &guardedController{}
	m.Add(c)
	require.NoError(b, m.Start(b.Context(), 0))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	}()
	c.mu.Lock()
	guard := c.guards[0]
	c.mu.Unlock()
	b.Run("child", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := guard(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("manager", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := m.LeaseGuard(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A guard that fails after the headers have gone out, before the body has
// ended (a process paused in between), aborts the request: the server never
// receives a whole body to act on.
func TestGuardTransportChecksAgainAtTheBodysEnd(t *testing.T) {
	var whole atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			whole.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	var calls atomic.Int32
	notHeld := errors.New("not held any more")
	guard := func() error {
		if calls.Add(1) == 1 {
			return nil // at the send
		}
		return notHeld // at the body
	}
	req, err := http.NewRequest(http.MethodPatch, srv.URL+"/x", strings.NewReader(`{"data":{}}`))
	require.NoError(t, err)
	_, err = (&http.Client{Transport: cm.GuardTransport(guard, nil)}).Do(req)
	require.ErrorIs(t, err, notHeld)
	assert.Contains(t, err.Error(), "refused by the lease guard")
	assert.Zero(t, whole.Load(), "no whole body reached the server")

	calls.Store(0)
	ok := func() error { return nil }
	req, err = http.NewRequest(http.MethodPatch, srv.URL+"/x", strings.NewReader(`{"data":{}}`))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: cm.GuardTransport(ok, nil)}).Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, int32(1), whole.Load())
}
