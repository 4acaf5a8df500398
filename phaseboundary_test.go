package controllermanager_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// The holes at phase boundaries that issue 12 names, each reproduced through
// the public API with ordinary awkward children: a Run whose slow setup
// ignores its context, a Shutdown that hangs, a webhook that fails while the
// lease changes hands, a subscriber that blocks. Each test failed before
// the fix it names.

// pbController is a controller whose Run blocks, ignoring its context, until
// release is closed, then starts a worker; Shutdown stops that worker. It
// records every call, and the lease holder seen at each.
type pbController struct {
	name    string
	srv     *leasetest.Server
	release chan struct{} // closed: Run's setup ends
	hang    chan struct{} // non-nil: Shutdown blocks until it is closed

	mu         sync.Mutex
	log        []string // "run>", "run<", "shutdown>", "shutdown<"
	inRun      int
	running    int // incarnations inside Run→Shutdown
	overlapped bool
	worker     bool
	runs       atomic.Int32
	report     func(error) // the last incarnation's FailureReporter
}

func (c *pbController) fail(err error) {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	report(err)
}

func (c *pbController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

func (c *pbController) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

func (c *pbController) Run(ctx context.Context) error {
	c.runs.Add(1)
	c.mu.Lock()
	c.log = append(c.log, "run>")
	c.inRun++
	c.running++
	if c.running > 1 {
		c.overlapped = true
	}
	c.mu.Unlock()
	if c.release != nil {
		<-c.release // a slow setup step that ignores ctx
	}
	c.mu.Lock()
	c.log = append(c.log, "run<")
	c.inRun--
	c.worker = true // the worker it starts
	c.report, _ = cm.FailureReporter(ctx)
	c.mu.Unlock()
	return nil
}

func (c *pbController) Shutdown(context.Context) {
	c.mu.Lock()
	c.log = append(c.log, "shutdown>")
	if c.inRun > 0 {
		c.log = append(c.log, "SHUTDOWN-BESIDE-RUN")
	}
	c.mu.Unlock()
	if c.hang != nil {
		<-c.hang
	}
	c.mu.Lock()
	c.worker = false
	c.running--
	c.log = append(c.log, "shutdown<")
	c.mu.Unlock()
}

func (c *pbController) journal() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

func (c *pbController) workerRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.worker
}

func pbManager(t *testing.T, srv *leasetest.Server, id string, onLost cm.LeaseLostAction, sup *cm.SupervisionSpec, opts ...cm.Option) (*cm.ControllerManager, *leasetest.Client) {
	t.Helper()
	client := srv.Client(id)
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(onLost), Supervision: sup}, "",
		append([]cm.Option{cm.WithIdentity(id), elQuiet}, opts...)...)
	require.NoError(t, err)
	return m, client
}

// pbRequest sends msg to the root supervisor and waits for its answer.
func pbRequest(m *cm.ControllerManager, msg any) error {
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	_, err := m.Request(ctx, msg)
	return err
}

func pbStatus(t *testing.T, m *cm.ControllerManager) cm.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	st, err := m.Status(ctx)
	require.NoError(t, err)
	return st
}

func pbChild(st cm.Status, name string) supervisor.ChildStatus {
	for _, c := range st.Children {
		if c.Name == name {
			return c
		}
	}
	return supervisor.ChildStatus{}
}

// Defect 1: ShutdownAndWait while the manager is Starting used to run a
// controller's Shutdown at once, beside its first Run, and give the lease up
// while that Run still ran; the worker it started after was never stopped.
func TestShutdownDuringStartWaitsForRun(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	ctrl := &pbController{name: "slow", srv: srv, release: make(chan struct{})}
	m, _ := pbManager(t, srv, "a", cm.LeaseLostExit, nil)
	m.Add(ctrl)
	started := make(chan error, 1)
	go func() { started <- m.Start(context.Background(), 0) }()
	elEventually(t, "Run entered", func() bool { return ctrl.runs.Load() == 1 })

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		m.ShutdownAndWait(context.Background())
	}()
	err := <-started
	require.Error(t, err, "a Start ended by ShutdownAndWait fails")
	assert.ErrorIs(t, err, context.Canceled)

	// While Run is still in its setup, nothing is shut down and the lease is kept.
	elConsistently(t, 200*time.Millisecond, "the lease is kept and Shutdown waits while Run runs", func() bool {
		return srv.Holder(elNamespace, elLeaseName) == "a" && !strings.Contains(strings.Join(ctrl.journal(), " "), "shutdown>")
	})
	close(ctrl.release)
	<-stopped
	assert.Equal(t, []string{"run>", "run<", "shutdown>", "shutdown<"}, ctrl.journal())
	assert.False(t, ctrl.workerRunning(), "the worker Run started must be stopped")
	assert.Empty(t, srv.Holder(elNamespace, elLeaseName), "the lease is given up once Shutdown returned")
	assert.NoError(t, m.Err())
}

// Defect 1, the Reelect path: a lease lost during Starting used to run
// Shutdown beside the first Run, and once reelected a second Run overlapped
// the first.
func TestLeaseLostDuringStartNeverOverlapsRuns(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	ctrl := &pbController{name: "slow", srv: srv, release: make(chan struct{})}
	m, client := pbManager(t, srv, "a", cm.LeaseLostReelect, nil)
	m.Add(ctrl)
	var lost atomic.Bool
	m.Subscribe(func(e cm.Event) {
		if e.Type == cm.LeaderLost {
			lost.Store(true)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	started := make(chan error, 1)
	go func() { started <- m.Start(context.Background(), 0) }()
	elEventually(t, "Run entered", func() bool { return ctrl.runs.Load() == 1 })

	client.Partition(true)
	elEventually(t, "the lease is lost", lost.Load)
	assert.NotContains(t, ctrl.journal(), "shutdown>", "Shutdown must wait for Run to return")
	close(ctrl.release) // within the fence timeout: Run returns, then Shutdown runs
	elEventually(t, "fenced", func() bool { return strings.Contains(strings.Join(ctrl.journal(), " "), "shutdown<") })
	client.Partition(false)
	select {
	case err := <-started:
		require.NoError(t, err, "Start returns once reelected and started")
	case <-time.After(elWait):
		t.Fatal("not reelected")
	}
	elEventually(t, "Run again", func() bool { return ctrl.runs.Load() == 2 })
	j := ctrl.journal()
	assert.NotContains(t, j, "SHUTDOWN-BESIDE-RUN", "journal: %v", j)
	ctrl.mu.Lock()
	assert.False(t, ctrl.overlapped, "two incarnations inside Run→Shutdown at once: %v", j)
	ctrl.mu.Unlock()
}

// pbWebhook is a webhook that reports a failure from Start when fail is
// set, and is not Ready while notReady is set.
type pbWebhook struct {
	name     string
	fail     atomic.Bool
	notReady atomic.Bool
	starts   atomic.Int32
}

func (w *pbWebhook) Name() string { return w.name }
func (w *pbWebhook) Path() string { return "/" + w.name }
func (w *pbWebhook) Ready() bool  { return !w.notReady.Load() }
func (w *pbWebhook) Start(ctx context.Context) error {
	w.starts.Add(1)
	if w.fail.Load() {
		report, _ := cm.FailureReporter(ctx)
		report(errors.New("webhook broke"))
	}
	return nil
}
func (w *pbWebhook) Shutdown(context.Context) {}
func (w *pbWebhook) Handle(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{Allowed: true}, nil
}

// Defect 2: a webhook backing off when the lease was lost and regained
// stayed BackingOff for ever: fencing cancelled its restart plan too, and
// reset only the controllers and stores. Also with AllForOne, whose plan
// mixes the webhook with the fenced controller.
func TestReelectKeepsAWebhookRestarting(t *testing.T) {
	t.Parallel()
	for _, strategy := range []cm.SupervisionStrategy{cm.OneForOne, cm.AllForOne, cm.RestForOne} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			srv := leasetest.NewServer()
			hook := &pbWebhook{name: "hook"}
			ctrl := &pbController{name: "ctrl", srv: srv}
			sup := &cm.SupervisionSpec{Strategy: strategy,
				InitialBackoff: metav1.Duration{Duration: 3 * time.Second},
				MaxBackoff:     metav1.Duration{Duration: 3 * time.Second}}
			m, client := pbManager(t, srv, "a", cm.LeaseLostReelect, sup)
			m.Add(hook, ctrl)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), elWait)
				defer cancel()
				m.ShutdownAndWait(ctx)
			})
			require.NoError(t, m.Start(context.Background(), 0))

			// The webhook fails once (its restart's Start does not) and backs off.
			hook.fail.Store(true)
			require.NoError(t, pbRequest(m, supervisor.RestartChild{Name: "hook"}))
			hook.fail.Store(false)
			elEventually(t, "the webhook backs off", func() bool {
				return pbChild(pbStatus(t, m), "hook").State == supervisor.StateBackingOff
			})
			// The lease is lost while it backs off, and regained.
			client.Partition(true)
			elEventually(t, "fenced", func() bool { return pbStatus(t, m).Phase == cm.PhaseElecting })
			client.Partition(false)
			elEventually(t, "the webhook restarted", func() bool {
				return pbChild(pbStatus(t, m), "hook").State == supervisor.StateRunning
			})
			elEventually(t, "reelected and running", func() bool { return pbStatus(t, m).Phase == cm.PhaseRunning })
			assert.Equal(t, supervisor.StateRunning, pbChild(pbStatus(t, m), "ctrl").State)
		})
	}
}

// Defect 3: a replica fenced with Reelect never probed its webhooks again,
// while a fresh standby does.
func TestFencedReplicaStillProbesItsWebhooks(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	hook := &pbWebhook{name: "hook"}
	sup := &cm.SupervisionSpec{
		HealthInterval:     metav1.Duration{Duration: 20 * time.Millisecond},
		HealthTimeout:      metav1.Duration{Duration: 500 * time.Millisecond},
		UnhealthyThreshold: 1,
		InitialBackoff:     metav1.Duration{Duration: 10 * time.Millisecond},
	}
	m, client := pbManager(t, srv, "a", cm.LeaseLostReelect, sup)
	m.Add(hook, &pbController{name: "ctrl", srv: srv})
	var unhealthy atomic.Int32
	m.Subscribe(func(e cm.Event) {
		if e.Type == cm.ChildUnhealthy && e.Child == "hook" {
			unhealthy.Add(1)
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	require.NoError(t, m.Start(context.Background(), 0))
	client.Partition(true) // and stays cut off: a standby from now on
	elEventually(t, "fenced", func() bool { return pbStatus(t, m).Phase == cm.PhaseElecting })
	hook.notReady.Store(true)
	elEventually(t, "the standby's webhook is probed and found not ready", func() bool { return unhealthy.Load() > 0 })
	elEventually(t, "and restarted", func() bool { return hook.starts.Load() >= 2 })
}

// Defect 4: an escalation over a Shutdown that hangs never finished: the
// manager stayed ShuttingDown, Done never closed, Err stayed nil and the
// lease was renewed for ever.
func TestEscalationOverAHungShutdownFails(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	stuck := &pbController{name: "stuck", srv: srv, hang: hang}
	other := &pbController{name: "other", srv: srv}
	sup := &cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: 300 * time.Millisecond}}
	m, _ := pbManager(t, srv, "a", cm.LeaseLostExit, sup)
	m.Add(stuck, other)
	require.NoError(t, m.Start(context.Background(), 0))
	elEventually(t, "running", func() bool { return stuck.runs.Load() == 1 })
	// A failure: the restart's Shutdown hangs past ShutdownTimeout, which escalates.
	stuck.fail(errors.New("worker broke"))

	select {
	case <-m.Done():
	case <-time.After(elWait):
		t.Fatalf("the manager did not stop: phase %s", pbStatus(t, m).Phase)
	}
	err := m.Err()
	require.Error(t, err)
	var uerr *cm.UnstoppedError
	require.ErrorAs(t, err, &uerr, "Err names the children that did not stop")
	require.Len(t, uerr.Children, 1)
	assert.Equal(t, "stuck", uerr.Children[0].Name)
	assert.Contains(t, string(uerr.Children[0].Stack), "pbController", "with the stack of the stuck Shutdown")
	assert.False(t, other.workerRunning(), "the other controller was shut down")
	// The lease is not given up (the stuck child may still run), and not renewed either.
	assert.Equal(t, "a", srv.Holder(elNamespace, elLeaseName))
	// A renewal sent before the end may still land after it on a loaded
	// machine (it failed a CI run beside busy loops): what must hold is
	// that the writes stop, three retry periods without one.
	elEventually(t, "no more renewals", func() bool {
		writes := len(srv.History())
		_, lapsed := lapse(3*elRetryPeriod, func() bool { return len(srv.History()) == writes })
		return !lapsed
	})
}

// Defect 5: a subscriber that blocks made ShutdownAndWait(Background) hang
// for ever after the manager had stopped.
func TestBlockedSubscriberDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	m := cm.NewBaseManager(cm.NewContext(nil), elQuiet, cm.WithSubscriberDrainTimeout(50*time.Millisecond))
	block := make(chan struct{})
	var once sync.Once
	cancel := m.Subscribe(func(cm.Event) { <-block })
	t.Cleanup(func() { once.Do(func() { close(block) }); cancel() })
	require.NoError(t, m.Start(context.Background()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.ShutdownAndWait(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(elWait):
		t.Fatal("ShutdownAndWait waits for a blocked subscriber")
	}
	once.Do(func() { close(block) })
}

// Defect 6: a panic in user code was logged without its stack.
func TestPanicIsLoggedWithItsStack(t *testing.T) {
	t.Parallel()
	logs := &recordingHandler{store: &recordStore{}}
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", cm.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	var once atomic.Bool
	m.Add(&pbPanicky{once: &once})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	require.NoError(t, m.Start(context.Background(), 0))
	err = pbRequest(m, supervisor.RestartChild{Name: "panicky"})
	require.ErrorContains(t, err, "panic in Run: boom", "the restart's Run panicked")
	elEventually(t, "the panic is logged with its stack", func() bool {
		for _, r := range logs.records() {
			if strings.Contains(r, "stack=") && strings.Contains(r, "panicky") && strings.Contains(r, "boom") {
				return true
			}
		}
		return false
	})
	n := 0
	for _, r := range logs.records() {
		if strings.Contains(r, "stack=") && strings.Contains(r, "(*pbPanicky).Run") {
			n++
		}
	}
	assert.Equal(t, 1, n, "logged once")
}

// pbPanicky's second Run panics.
type pbPanicky struct{ once *atomic.Bool }

func (p *pbPanicky) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "panicky", Healthy: true}
}
func (p *pbPanicky) Shutdown(context.Context) {}
func (p *pbPanicky) Run(context.Context) error {
	if p.once.Swap(true) {
		panic("boom")
	}
	return nil
}

// recordingHandler keeps every record as text.
type recordingHandler struct {
	store *recordStore
	pre   []slog.Attr
}

type recordStore struct {
	mu   sync.Mutex
	recs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.pre {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.store.mu.Lock()
	h.store.recs = append(h.store.recs, b.String())
	h.store.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordingHandler{store: h.store, pre: append(append([]slog.Attr(nil), h.pre...), as...)}
}
func (h *recordingHandler) WithGroup(string) slog.Handler { return h }
func (h *recordingHandler) records() []string {
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	return append([]string(nil), h.store.recs...)
}

// Found while fixing defect 2: with AllForOne or RestForOne, a webhook
// failing on a standby took the controllers, never started, into its restart
// plan, which then ran them without the lease.
func TestStandbyWebhookFailureStartsNoController(t *testing.T) {
	t.Parallel()
	for _, strategy := range []cm.SupervisionStrategy{cm.AllForOne, cm.RestForOne} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			srv := leasetest.NewServer()
			pbHeldBy(t, srv, "other")
			hook := &pbWebhook{name: "hook"}
			ctrl := &pbController{name: "ctrl", srv: srv}
			sup := &cm.SupervisionSpec{Strategy: strategy,
				HealthInterval:     metav1.Duration{Duration: 20 * time.Millisecond},
				HealthTimeout:      metav1.Duration{Duration: 500 * time.Millisecond},
				UnhealthyThreshold: 1,
				InitialBackoff:     metav1.Duration{Duration: time.Millisecond}}
			m, _ := pbManager(t, srv, "a", cm.LeaseLostExit, sup)
			m.Add(hook, ctrl) // the webhook first, so RestForOne's rest is the controller
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(func() {
				cancel()
				ctx, cancel := context.WithTimeout(context.Background(), elWait)
				defer cancel()
				m.ShutdownAndWait(ctx)
			})
			go func() { _ = m.Start(ctx, 0) }() // blocks: the lease is held by "other"
			elEventually(t, "a standby whose webhook started", func() bool {
				return pbStatus(t, m).Phase == cm.PhaseElecting && hook.starts.Load() == 1
			})
			hook.notReady.Store(true) // the probe finds it stuck: a failure
			elEventually(t, "the webhook restarts", func() bool { return hook.starts.Load() >= 2 })
			hook.notReady.Store(false)
			elEventually(t, "the webhook runs again", func() bool {
				return pbChild(pbStatus(t, m), "hook").State == supervisor.StateRunning
			})
			assert.Zero(t, ctrl.runs.Load(), "a standby ran a controller")
			assert.Equal(t, "other", srv.Holder(elNamespace, elLeaseName))
		})
	}
}

// pbHeldBy creates the Lease, held by holder for an hour.
func pbHeldBy(t *testing.T, srv *leasetest.Server, holder string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	secs := int32(3600)
	_, err := srv.Client(holder).CoordinationV1().Leases(elNamespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: elNamespace, Name: elLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs,
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// Found by the state-space test: a lease lost during a requested shutdown
// whose Shutdown hangs was never fenced: the child stayed active past the
// lease's expiry and Done never closed. The fence timeout bounds it now.
func TestLeaseLostDuringAHungShutdownIsFenced(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	stuck := &pbController{name: "stuck", srv: srv, hang: hang}
	m, client := pbManager(t, srv, "a", cm.LeaseLostExit, nil)
	m.Add(stuck)
	require.NoError(t, m.Start(context.Background(), 0))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	m.ShutdownAndWait(ctx) // gives up on the hung Shutdown; the manager waits on
	client.Partition(true)
	select {
	case <-m.Done():
	case <-time.After(elWait):
		t.Fatalf("not fenced: phase %s", pbStatus(t, m).Phase)
	}
	assert.ErrorIs(t, m.Err(), lease.ErrLost)
	assert.ErrorContains(t, m.Err(), `controller "stuck"`)
}
