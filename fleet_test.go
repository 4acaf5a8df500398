package controllermanager_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/supervisor"
)

// The fleet's tests run members as in-process API servers (fakeMember),
// the thresholds on a fake clock, and wait on events: a step of the
// clock is taken only while something waits on it.

const (
	fleetPeriod  = time.Second
	fleetTimeout = time.Second // real: it bounds a probe's I/O; roomy, for a loaded race build
	fleetFail    = 3 * time.Second
	fleetSucceed = 2 * time.Second
)

func fleetSpec() cm.FleetSpec {
	return cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: fleetPeriod},
		ProbeTimeout:     metav1.Duration{Duration: fleetTimeout},
		FailureThreshold: metav1.Duration{Duration: fleetFail},
		SuccessThreshold: metav1.Duration{Duration: fleetSucceed},
	}
}

// memberMode is how a fakeMember answers /readyz.
type memberMode int32

const (
	memberOK memberMode = iota
	memberFailing
	memberSlow    // answers after 100 ms
	memberHanging // never answers (until the probe gives up)
)

// fakeMember stands in for a member cluster's API server.
type fakeMember struct {
	srv     *httptest.Server
	mode    atomic.Int32
	release chan struct{}
	probes  atomic.Int32
	writes  atomic.Int32 // requests other than GET that reached it
}

func newFakeMember(t *testing.T, mode memberMode) *fakeMember {
	t.Helper()
	m := &fakeMember{release: make(chan struct{})}
	m.mode.Store(int32(mode))
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			if r.Method != http.MethodGet {
				m.writes.Add(1)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{}`)
			return
		}
		m.probes.Add(1)
		switch memberMode(m.mode.Load()) {
		case memberFailing:
			http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
			return
		case memberSlow:
			select {
			case <-time.After(100 * time.Millisecond): // the member's latency, not a wait of the test's
			case <-r.Context().Done():
				return
			}
		case memberHanging:
			select {
			case <-r.Context().Done():
			case <-m.release:
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(func() {
		close(m.release)
		m.srv.Close()
	})
	return m
}

func (m *fakeMember) set(mode memberMode) { m.mode.Store(int32(mode)) }

func (m *fakeMember) config() *rest.Config {
	return &rest.Config{Host: m.srv.URL, BearerToken: "token-1"}
}

// handProvider is a ClusterProvider the test drives by hand.
type handProvider struct {
	mu        sync.Mutex
	engage    func(string, *rest.Config) error
	disengage func(string)
	runs      int
	ready     chan struct{} // closed at the first Run
	initial   map[string]*rest.Config
	fail      error // Run returns it after engaging the initial clusters, once
	panics    bool  // Run panics, once
}

func newHandProvider(initial map[string]*rest.Config) *handProvider {
	return &handProvider{ready: make(chan struct{}), initial: initial}
}

func (p *handProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.engage, p.disengage = engage, disengage
	p.runs++
	first := p.runs == 1
	fail, panics := p.fail, p.panics
	p.fail, p.panics = nil, false
	p.mu.Unlock()
	for name, cfg := range p.initial {
		if err := engage(name, cfg); err != nil {
			return err
		}
	}
	if first {
		close(p.ready)
	}
	if panics {
		panic("provider exploded")
	}
	if fail != nil {
		return fail
	}
	<-ctx.Done()
	return nil
}

func (p *handProvider) Engage(t *testing.T, name string, cfg *rest.Config) error {
	t.Helper()
	awaitRecv(t, p.ready, "the provider's Run")
	p.mu.Lock()
	engage := p.engage
	p.mu.Unlock()
	return engage(name, cfg)
}

func (p *handProvider) Disengage(t *testing.T, name string) {
	t.Helper()
	awaitRecv(t, p.ready, "the provider's Run")
	p.mu.Lock()
	disengage := p.disengage
	p.mu.Unlock()
	disengage(name)
}

// clusterCtrl is the controller build makes for every member cluster.
type clusterCtrl struct {
	cluster cm.Cluster
	runs    atomic.Int32
	stops   atomic.Int32
	fail    atomic.Bool // Run fails
}

func (c *clusterCtrl) Run(context.Context) error {
	c.runs.Add(1)
	if c.fail.Load() {
		return errors.New("cannot start")
	}
	return nil
}
func (c *clusterCtrl) Shutdown(context.Context) { c.stops.Add(1) }
func (c *clusterCtrl) Name() string             { return "ctrl" }
func (c *clusterCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

// builds records what build made, by cluster.
type builds struct {
	mu     sync.Mutex
	ctrls  map[string][]*clusterCtrl
	panics map[string]bool
}

func newBuilds() *builds {
	return &builds{ctrls: map[string][]*clusterCtrl{}, panics: map[string]bool{}}
}

func (b *builds) build(c cm.Cluster) []cm.Runnable {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.panics[c.Name()] {
		panic("build of " + c.Name() + " exploded")
	}
	ctrl := &clusterCtrl{cluster: c}
	b.ctrls[c.Name()] = append(b.ctrls[c.Name()], ctrl)
	return []cm.Runnable{ctrl}
}

func (b *builds) of(name string) []*clusterCtrl {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*clusterCtrl(nil), b.ctrls[name]...)
}

// eventLog keeps every event, for waits and for assertions on order.
type eventLog struct {
	mu     sync.Mutex
	events []cm.Event
	notify chan struct{}
}

func subscribe(t *testing.T, mgr *cm.ControllerManager) *eventLog {
	l := &eventLog{notify: make(chan struct{}, 1)}
	cancel := mgr.Subscribe(func(e cm.Event) {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
		select {
		case l.notify <- struct{}{}:
		default:
		}
	})
	t.Cleanup(cancel)
	return l
}

func (l *eventLog) find(pred func(cm.Event) bool) (cm.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if pred(e) {
			return e, true
		}
	}
	return cm.Event{}, false
}

func (l *eventLog) all() []cm.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]cm.Event(nil), l.events...)
}

func (l *eventLog) count(pred func(cm.Event) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if pred(e) {
			n++
		}
	}
	return n
}

// waitForNth waits for the nth event pred matches.
func (l *eventLog) waitForNth(t *testing.T, n int, pred func(cm.Event) bool) {
	t.Helper()
	l.waitUntil(t, nil, 0, func() bool { return l.count(pred) >= n })
}

// waitForNthStepping is waitForNth, stepping clk by the probe period.
func (l *eventLog) waitForNthStepping(t *testing.T, clk *clocktesting.FakeClock, n int, pred func(cm.Event) bool) {
	t.Helper()
	l.waitUntil(t, clk, fleetPeriod, func() bool { return l.count(pred) >= n })
}

func is(t cm.EventType, child string) func(cm.Event) bool {
	return func(e cm.Event) bool { return e.Type == t && e.Child == child }
}

// waitFor waits for an event pred matches; when clk is given, it steps it
// by step whenever something waits on it, so that probes and thresholds
// move on. The deadline is a test's failure, not an assertion on timing.
func (l *eventLog) waitFor(t *testing.T, clk *clocktesting.FakeClock, step time.Duration, pred func(cm.Event) bool) cm.Event {
	t.Helper()
	var found cm.Event
	l.waitUntil(t, clk, step, func() bool {
		e, ok := l.find(pred)
		found = e
		return ok
	})
	return found
}

// waitUntil polls cond at every event (and every few milliseconds), with a
// deadline, stepping clk as waitFor does.
func (l *eventLog) waitUntil(t *testing.T, clk *clocktesting.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for !cond() {
		if clk != nil && clk.HasWaiters() {
			clk.Step(step)
		}
		poll := time.NewTimer(5 * time.Millisecond)
		select {
		case <-l.notify:
		case <-poll.C:
		case <-deadline.C:
			l.mu.Lock()
			events := append([]cm.Event(nil), l.events...)
			l.mu.Unlock()
			t.Fatalf("not within the deadline; events: %v", events)
		}
		poll.Stop()
	}
}

// fleetManager starts a manager (election off) with fleet on clk.
func fleetManager(t *testing.T, clk *clocktesting.FakeClock, children ...cm.Runnable) (*cm.ControllerManager, *eventLog) {
	t.Helper()
	return fleetManagerWith(t, clk, cm.ControllerManagerConfigSpec{}, children...)
}

func fleetManagerWith(t *testing.T, clk *clocktesting.FakeClock, cfg cm.ControllerManagerConfigSpec, children ...cm.Runnable) (*cm.ControllerManager, *eventLog) {
	t.Helper()
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cfg, "",
		cm.WithClock(clk), cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	mgr.Add(children...)
	log := subscribe(t, mgr)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	return mgr, log
}

// oneMemberOnline starts a manager whose one child is a fleet of one member
// cluster, "a", answering its probes, and waits until "a" is Online.
func oneMemberOnline(t *testing.T) (*clocktesting.FakeClock, *fakeMember, *handProvider, *builds, *cm.Fleet, *cm.ControllerManager, *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	return clk, a, prov, bl, fleet, mgr, log
}

func startFleet(t *testing.T, mgr *cm.ControllerManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, mgr.Start(ctx, 0))
}

func fleetChild(t *testing.T, mgr *cm.ControllerManager, path string) (supervisor.ChildStatus, bool) {
	t.Helper()
	st, err := mgr.Status(context.Background())
	require.NoError(t, err)
	return st.Child(path)
}

func clusterReady(t *testing.T, mgr *cm.ControllerManager, fleet, cluster string) (float64, bool) {
	t.Helper()
	mfs, err := mgr.Gatherer().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "controllermanager_cluster_ready" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["fleet"] == fleet && labels["cluster"] == cluster {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestFleetEngagesAndDisengagesAtRunTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b, c := newFakeMember(t, memberOK), newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)

	for _, name := range []string{"a", "b"} {
		log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/"+name))
		cs, ok := fleetChild(t, mgr, "fleet/"+name+"/ctrl")
		require.True(t, ok, name)
		require.Equal(t, supervisor.StateRunning, cs.State)
		v, ok := clusterReady(t, mgr, "fleet", name)
		require.True(t, ok)
		require.Equal(t, 1.0, v)
	}
	engaged := log.waitFor(t, nil, 0, is(cm.ClusterEngaged, "fleet/a"))
	require.Equal(t, cm.KindCluster, engaged.Kind)

	require.NoError(t, prov.Engage(t, "c", c.config()))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/c"))

	prov.Disengage(t, "b")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/b"))
	_, ok := fleetChild(t, mgr, "fleet/b")
	require.False(t, ok, "a disengaged cluster's subtree is removed")
	require.Equal(t, int32(1), bl.of("b")[0].stops.Load())
	_, ok = clusterReady(t, mgr, "fleet", "b")
	require.False(t, ok, "a disengaged cluster has no series")
	_, ok = fleet.Cluster("b")
	require.False(t, ok)
	gone := bl.of("b")[0].cluster
	require.Error(t, gone.Context().Err(), "a disengaged cluster's context has ended")
	_, err := gone.Client().CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{}, metav1.CreateOptions{})
	require.ErrorIs(t, err, cm.ErrClusterDisengaged, "its writes are refused")

	for _, name := range []string{"a", "c"} {
		cs, ok := fleetChild(t, mgr, "fleet/"+name+"/ctrl")
		require.True(t, ok)
		require.Equal(t, supervisor.StateRunning, cs.State, name)
		require.Zero(t, bl.of(name)[0].stops.Load(), "%s was not disturbed", name)
	}
	got := fleet.Clusters()
	require.Len(t, got, 2)
	require.Equal(t, cm.ClusterStateOnline, got[0].State)
	require.Equal(t, "fleet/a", got[0].Path)

	// The cluster's config and client reach its API server.
	ctrl := bl.of("a")[0]
	require.Equal(t, a.srv.URL, ctrl.cluster.Config().Host)
	_, err = ctrl.cluster.Client().CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{}, metav1.CreateOptions{})
	require.NoError(t, err, "a write passes the guard while the manager runs (election off)")
	require.NoError(t, ctrl.cluster.Context().Err())
}

func TestFleetOutageIsContainedWithHysteresis(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))

	failedAt := clk.Now()
	b.set(memberFailing)
	off := log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/b"))
	require.GreaterOrEqual(t, off.Time.Sub(failedAt), fleetFail, "Offline only after FailureThreshold of failures")
	require.ErrorContains(t, off.Err, "500")

	cs, ok := fleetChild(t, mgr, "fleet/b")
	require.True(t, ok, "an Offline cluster's subtree stays in the tree, stopped")
	require.Equal(t, supervisor.StateStopped, cs.State)
	ctrl := bl.of("b")[0]
	require.Equal(t, int32(1), ctrl.stops.Load(), "its informers are released: Shutdown ran")
	leaf, _ := fleetChild(t, mgr, "fleet/b/ctrl")
	require.Zero(t, leaf.Failures, "an outage spends no budget")
	require.Zero(t, leaf.Restarts)
	v, _ := clusterReady(t, mgr, "fleet", "b")
	require.Zero(t, v)
	st, _ := fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateOffline, st.State)
	require.Error(t, st.Err)
	// Its group, or anything in it, is not started by hand while Offline:
	// its stores would wait on an API server that does not answer.
	ctx := context.Background()
	for _, err := range []error{mgr.StartChild(ctx, "fleet/b"), mgr.RestartChild(ctx, "fleet/b/ctrl"),
		func() error { _, err := mgr.Request(ctx, supervisor.StartChild{Name: "fleet/b/ctrl"}); return err }()} {
		require.ErrorIs(t, err, cm.ErrClusterOffline)
		require.ErrorContains(t, err, `cluster "b" is Offline`)
	}
	mgr.Send(supervisor.StartChild{Name: "fleet/b"}) // not sent: the Status asked after it finds b stopped
	cs, _ = fleetChild(t, mgr, "fleet/b")
	require.Equal(t, supervisor.StateStopped, cs.State, "a StartChild sent without an answer is refused too")
	require.Equal(t, int32(1), ctrl.runs.Load(), "nothing started by the refused calls")

	// The others run on, and the pod's probes pass.
	cs, _ = fleetChild(t, mgr, "fleet/a/ctrl")
	require.Equal(t, supervisor.StateRunning, cs.State)
	require.Zero(t, bl.of("a")[0].stops.Load())
	h := health.NewHandler(mgr)
	for _, path := range []string{"/livez", "/readyz", "/healthz"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", path, rec.Body)
	}

	// Probed on while Offline: no restart until it answers for
	// SuccessThreshold.
	answeredAt := clk.Now()
	b.set(memberOK)
	on := log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
		return e.Type == cm.ClusterOnline && e.Child == "fleet/b" && e.Time.After(off.Time)
	})
	require.GreaterOrEqual(t, on.Time.Sub(answeredAt), fleetSucceed, "Online again only after SuccessThreshold of answers")
	require.Equal(t, int32(2), ctrl.runs.Load(), "started again once (StartChild)")
	v, _ = clusterReady(t, mgr, "fleet", "b")
	require.Equal(t, 1.0, v)
	require.Equal(t, 1, log.count(is(cm.ClusterOffline, "fleet/b")))
}

func TestFleetUnreachableClusterStartsOfflineAndNeverBlocksStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	ok, slow, hung := newFakeMember(t, memberOK), newFakeMember(t, memberSlow), newFakeMember(t, memberHanging)
	spec := fleetSpec()
	spec.ProbeTimeout = metav1.Duration{Duration: 500 * time.Millisecond}
	prov := newHandProvider(map[string]*rest.Config{"ok": ok.config(), "slow": slow.config(), "hung": hung.config(),
		"gone": {Host: "http://127.0.0.1:1"}})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, spec)
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr) // returns: Running with the others
	require.True(t, mgr.IsStarted())

	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/ok"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/slow"))
	for _, name := range []string{"hung", "gone"} {
		e := log.waitFor(t, nil, 0, is(cm.ClusterOffline, "fleet/"+name))
		require.Error(t, e.Err)
		_, added := fleetChild(t, mgr, "fleet/"+name)
		require.False(t, added, "a cluster that never answered has no subtree yet")
		require.Empty(t, bl.of(name))
	}

	hung.set(memberOK)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOnline, "fleet/hung"))
	cs, found := fleetChild(t, mgr, "fleet/hung/ctrl")
	require.True(t, found)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

func TestFleetRotatedConfigRestartsTheSubtreeOnce(t *testing.T) {
	_, a, prov, bl, _, mgr, log := oneMemberOnline(t)

	require.NoError(t, prov.Engage(t, "a", a.config()), "an equal config")
	rotated := a.config()
	rotated.BearerToken = "token-2"
	require.NoError(t, prov.Engage(t, "a", rotated))
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/a"))

	ctrls := bl.of("a")
	require.Len(t, ctrls, 2, "built once more, on the new config; events: %v", log.all())
	require.Equal(t, int32(1), ctrls[0].stops.Load())
	require.Error(t, ctrls[0].cluster.Context().Err(), "the old cluster's context ended")
	require.Equal(t, "token-2", ctrls[1].cluster.Config().BearerToken)
	require.NoError(t, ctrls[1].cluster.Context().Err())
	// The rotated config's ClusterEngaged came before the ClusterOnline
	// that follows from it, so it is here already.
	require.Equal(t, 2, log.count(is(cm.ClusterEngaged, "fleet/a")), "the equal config engaged nothing")
	var order []cm.EventType
	for _, e := range log.all() {
		if e.Child == "fleet/a" && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterOnline) {
			order = append(order, e.Type)
		}
	}
	require.Equal(t, []cm.EventType{cm.ClusterEngaged, cm.ClusterOnline, cm.ClusterEngaged, cm.ClusterOnline}, order,
		"each ClusterOnline after the ClusterEngaged it follows from")

	// Once the manager has stopped, the cluster's writes are refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mgr.ShutdownAndWait(ctx)
	require.Error(t, ctrls[1].cluster.Context().Err())
	_, err := ctrls[1].cluster.Client().CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{}, metav1.CreateOptions{})
	require.ErrorIs(t, err, cm.ErrClusterDisengaged)
}

// TestFleetEventsOfAClusterComeInOrder engages clusters at run time side
// by side, each new and then rotated, with members that answer at once: a
// new member's loop, started by engage, acts before engage has returned,
// and each of its ClusterOnline must still come after the ClusterEngaged it
// follows from.
func TestFleetEventsOfAClusterComeInOrder(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	prov := newHandProvider(nil)
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)

	names := []string{"a", "b", "c", "d", "e", "f"}
	members := map[string]*fakeMember{}
	for _, name := range names {
		members[name] = newFakeMember(t, memberOK)
	}
	engageAll := func(token string) {
		errs := make(chan error, len(names))
		var wg sync.WaitGroup
		for _, name := range names {
			cfg := members[name].config()
			cfg.BearerToken = token
			wg.Go(func() { errs <- prov.Engage(t, name, cfg) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	engageAll("token-1")
	for _, name := range names {
		log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/"+name))
	}
	engageAll("token-2")
	for _, name := range names {
		log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/"+name))
	}
	for _, name := range names {
		var order []cm.EventType
		for _, e := range log.all() {
			if e.Child == "fleet/"+name && (e.Type == cm.ClusterEngaged || e.Type == cm.ClusterOnline) {
				order = append(order, e.Type)
			}
		}
		require.Equal(t, []cm.EventType{cm.ClusterEngaged, cm.ClusterOnline, cm.ClusterEngaged, cm.ClusterOnline}, order, name)
	}
}

// TestFleetConcurrentEqualEngagesEngageOnce: a provider that calls engage
// with one new config from several goroutines at once (a resync racing a
// watch event) changes the cluster once: one ClusterEngaged, one rebuild.
func TestFleetConcurrentEqualEngagesEngageOnce(t *testing.T) {
	_, a, prov, bl, _, _, log := oneMemberOnline(t)

	const callers = 8
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		rotated := a.config()
		rotated.BearerToken = "token-2"
		wg.Go(func() { errs <- prov.Engage(t, "a", rotated) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/a"))
	require.Equal(t, 2, log.count(is(cm.ClusterEngaged, "fleet/a")), "events: %v", log.all())
	require.Len(t, bl.of("a"), 2, "built once on the first config, once on the second")
}

func TestFleetRefusesBadClusterNames(t *testing.T) {
	_, a, prov, bl, fleet, _, _ := oneMemberOnline(t)

	for _, name := range []string{"", ".", "..", "a/b", "provider", "with space", "tab\t", strings.Repeat("x", 254)} {
		err := prov.Engage(t, name, a.config())
		require.ErrorIs(t, err, cm.ErrInvalidClusterName, "%q", name)
		require.Contains(t, err.Error(), `fleet "fleet"`)
	}
	require.ErrorContains(t, prov.Engage(t, "nil", nil), "nil config")
	require.Len(t, fleet.Clusters(), 1, "nothing else engaged")
	require.Zero(t, bl.of("a")[0].stops.Load(), "nothing disturbed")
}

func TestFleetProviderFailuresAreSupervisedAndKeepTheClusters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*handProvider)
		want  string
	}{
		{"error", func(p *handProvider) { p.fail = errors.New("inventory unreachable") }, "inventory unreachable"},
		{"panic", func(p *handProvider) { p.panics = true }, "provider exploded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			a := newFakeMember(t, memberOK)
			prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
			tc.setup(prov)
			bl := newBuilds()
			fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
			mgr, log := fleetManager(t, clk, fleet)
			startFleet(t, mgr)
			failed := log.waitFor(t, nil, 0, is(cm.ChildFailed, "fleet/provider"))
			require.ErrorContains(t, failed.Err, tc.want)
			if tc.name == "panic" {
				require.ErrorContains(t, failed.Err, "goroutine", "the stack")
			}
			log.waitFor(t, clk, 100*time.Millisecond, is(cm.ChildRestarted, "fleet/provider"))
			log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
			require.Len(t, bl.of("a"), 1, "the cluster was kept across the provider's restart")
			require.Zero(t, bl.of("a")[0].stops.Load())
		})
	}
}

func TestFleetProviderThatBlocksStallsNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	prov := blockingProvider{started: make(chan struct{}), unblocked: make(chan struct{})}
	other := &clusterCtrl{}
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	mgr, _ := fleetManager(t, clk, fleet, other)
	startFleet(t, mgr)
	require.Equal(t, int32(1), other.runs.Load())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The provider's Run begins on a goroutine of the runner's: wait for
	// it, so that the shutdown meets a provider that blocks (a shutdown
	// before it began never calls it).
	select {
	case <-prov.started:
	case <-ctx.Done():
		t.Fatal("the provider's Run was not called")
	}
	mgr.ShutdownAndWait(ctx)
	require.NoError(t, mgr.Err())
	select {
	case <-prov.unblocked:
	case <-ctx.Done():
		t.Fatal("the provider's ctx did not end with the manager's shutdown")
	}
}

// awaitRecv waits for a receive from ch (a value or its close), or fails the test naming what it
// waited for after 30s: a wait on an event, bounded so that a missing event
// fails instead of hanging the package's run.
func awaitRecv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30s", what)
	}
}

// aRunsOnline is a condition for waitUntil: fleet/a's controller is
// Running and the fleet says a is Online.
func aRunsOnline(t *testing.T, fleet *cm.Fleet, mgr *cm.ControllerManager) func() bool {
	return func() bool {
		cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
		st, _ := fleet.Cluster("a")
		return ok && cs.State == supervisor.StateRunning && st.State == cm.ClusterStateOnline
	}
}

// closedYet is a condition for waitUntil: ch has been closed (an entered
// signal).
func closedYet(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// blockingProvider engages nothing and blocks until ctx ends.
type blockingProvider struct{ started, unblocked chan struct{} }

func (p blockingProvider) Run(ctx context.Context, _ func(string, *rest.Config) error, _ func(string)) error {
	close(p.started)
	<-ctx.Done()
	close(p.unblocked)
	return nil
}

func TestFleetBuildThatPanicsFailsOnlyItsCluster(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, x := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "x": x.config()})
	bl := newBuilds()
	bl.panics["x"] = true
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	e := log.waitFor(t, nil, 0, is(cm.ClusterOffline, "fleet/x"))
	require.ErrorContains(t, e.Err, "build panicked: build of x exploded")
	st, _ := fleet.Cluster("x")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	_, added := fleetChild(t, mgr, "fleet/x")
	require.False(t, added)
	st2, err := mgr.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, supervisor.PhaseRunning, st2.Phase)
}

func TestFleetDisengageDuringARestart(t *testing.T) {
	clk, _, prov, bl, _, mgr, log := oneMemberOnline(t)

	ctrl := bl.of("a")[0]
	ctrl.fail.Store(true)
	go func() { _ = mgr.RestartChild(context.Background(), "fleet/a/ctrl") }()
	log.waitFor(t, nil, 0, is(cm.ChildFailed, "fleet/a/ctrl")) // backing off now, on the fake clock
	prov.Disengage(t, "a")
	log.waitFor(t, clk, 100*time.Millisecond, is(cm.ClusterDisengaged, "fleet/a"))
	_, ok := fleetChild(t, mgr, "fleet/a")
	require.False(t, ok)
	runs := ctrl.runs.Load()
	clk.Step(time.Minute)
	_, ok = fleetChild(t, mgr, "fleet/a/ctrl")
	require.False(t, ok, "a removed child never runs again")
	require.Equal(t, runs, ctrl.runs.Load())
}

func TestFleetSpecIsValidated(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	spec := cm.FleetSpec{ProbePeriod: metav1.Duration{Duration: time.Second}, ProbeTimeout: metav1.Duration{Duration: 2 * time.Second},
		FailureThreshold: metav1.Duration{Duration: -1}}
	fleet := cm.NewFleet("fleet", nil, nil, spec)
	mgr, _ := fleetManager(t, clk, fleet)
	err := mgr.Start(context.Background(), 0)
	require.Error(t, err)
	for _, want := range []string{"fleet/provider", "probeTimeout (2s) must not exceed probePeriod (1s)", "failureThreshold must not be negative", "provider is nil", "build is nil"} {
		require.ErrorContains(t, err, want)
	}
}

func TestFleetDuplicateName(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	f1 := cm.NewFleet("fleet", newHandProvider(nil), newBuilds().build, cm.FleetSpec{})
	f2 := cm.NewFleet("fleet", newHandProvider(nil), newBuilds().build, cm.FleetSpec{})
	mgr, _ := fleetManager(t, clk, f1, f2)
	err := mgr.Start(context.Background(), 0)
	require.ErrorContains(t, err, `"fleet"`)
	require.ErrorContains(t, err, `both named "fleet"`)
}

// A config rotated while the cluster is Offline: the stopped subtree is
// removed, the new config probed, and the cluster is built on it once it
// answers, not before.
func TestFleetRotatedWhileOffline(t *testing.T) {
	clk, a, prov, bl, _, mgr, log := oneMemberOnline(t)
	a.set(memberFailing)
	log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/a"))

	rotated := a.config()
	rotated.BearerToken = "token-2"
	require.NoError(t, prov.Engage(t, "a", rotated))
	log.waitForNth(t, 2, is(cm.ClusterOffline, "fleet/a")) // the new config's first probe fails too
	_, ok := fleetChild(t, mgr, "fleet/a")
	require.False(t, ok, "the old subtree was removed")
	require.Len(t, bl.of("a"), 1, "not built on the new config while it does not answer")
	require.Error(t, bl.of("a")[0].cluster.Context().Err())

	a.set(memberOK)
	log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/a"))
	ctrls := bl.of("a")
	require.Len(t, ctrls, 2)
	require.Equal(t, "token-2", ctrls[1].cluster.Config().BearerToken)
	cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// A fleet goes wherever a group goes: added to a running manager, or
// inside a group, its members' paths under the fleet's.
func TestFleetAddedAtRunTimeAndInsideAGroup(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	bl := newBuilds()
	inner := cm.NewFleet("inner", cm.StaticClusters(map[string]*rest.Config{"a": a.config()}), bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, cm.NewGroup("outer", cm.SupervisionSpec{}, inner))
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "outer/inner/a"))
	_, ok := fleetChild(t, mgr, "outer/inner/a/ctrl")
	require.True(t, ok)
	v, ok := clusterReady(t, mgr, "outer/inner", "a")
	require.True(t, ok)
	require.Equal(t, 1.0, v)

	late := cm.NewFleet("late", cm.StaticClusters(map[string]*rest.Config{"b": a.config()}), bl.build, fleetSpec())
	require.NoError(t, mgr.AddChild(context.Background(), late))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "late/b"))
	cs, ok := fleetChild(t, mgr, "late/b/ctrl")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// stubbornProvider engages "a" and then ignores its context until
// released.
type stubbornProvider struct {
	cfg     *rest.Config
	release chan struct{}
	runs    atomic.Int32
}

func (p *stubbornProvider) Run(_ context.Context, engage func(string, *rest.Config) error, _ func(string)) error {
	p.runs.Add(1)
	if err := engage("a", p.cfg); err != nil {
		return err
	}
	<-p.release
	return nil
}

// stubbornFleet starts a manager whose one child is a fleet of one member,
// "a", whose provider ignores its context until released; the runner's
// Shutdown gives up at a ShutdownTimeout of 200 ms, on the real clock. It
// returns once "a" is Online.
func stubbornFleet(t *testing.T) (*stubbornProvider, *builds, *cm.ControllerManager, *eventLog) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := &stubbornProvider{cfg: a.config(), release: make(chan struct{})}
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManagerWith(t, clk, cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: 200 * time.Millisecond}}}, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	return prov, bl, mgr, log
}

// A runner restarted while its provider ignores its context: the runner's
// Shutdown gives up when its context ends, and the new incarnation waits
// for the old provider to return before it runs one of its own.
func TestFleetRestartWaitsForAProviderThatIgnoresItsContext(t *testing.T) {
	prov, bl, mgr, log := stubbornFleet(t)

	restarted := make(chan error, 1)
	go func() { restarted <- mgr.RestartChild(context.Background(), "fleet/provider") }()
	log.waitFor(t, nil, 0, is(cm.ChildRestarted, "fleet/provider")) // past the Shutdown's deadline
	require.NoError(t, <-restarted)
	require.Equal(t, int32(1), prov.runs.Load(), "no second provider while the first runs")

	close(prov.release)
	log.waitUntil(t, nil, 0, func() bool { return prov.runs.Load() == 2 })
	require.Len(t, bl.of("a"), 1, "the cluster was kept")
	require.Zero(t, bl.of("a")[0].stops.Load())
	cs, ok := fleetChild(t, mgr, "fleet/a/ctrl")
	require.True(t, ok)
	require.Equal(t, supervisor.StateRunning, cs.State)
}

// hangingCtrl is a member cluster's controller that reports a failure
// when asked (fail) and whose Shutdown, in the clusters named in hang,
// waits for release whatever its context says.
type hangingCtrl struct {
	runs    atomic.Int32
	mu      sync.Mutex
	report  func(error)
	release <-chan struct{} // nil: Shutdown returns at once
}

func (c *hangingCtrl) Run(ctx context.Context) error {
	c.runs.Add(1)
	c.mu.Lock()
	c.report, _ = cm.FailureReporter(ctx)
	c.mu.Unlock()
	return nil
}

func (c *hangingCtrl) Shutdown(context.Context) {
	if c.release != nil {
		<-c.release
	}
}

func (c *hangingCtrl) fail() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(errors.New("member work failed"))
}

func (c *hangingCtrl) Name() string { return "hung" }
func (c *hangingCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "hung", Healthy: true}
}

// A member cluster's controller whose Shutdown hangs during its restart
// (ignoring its context: a call to the member's API server with no
// deadline) stops that member's subtree, not the manager: the other
// members run on. Before, the manager escalated.
func TestFleetHungShutdownIsContainedInItsCluster(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	hung := map[string]*hangingCtrl{}
	build := func(c cm.Cluster) []cm.Runnable {
		h := &hangingCtrl{}
		if c.Name() == "b" {
			h.release = release
		}
		mu.Lock()
		hung[c.Name()] = h
		mu.Unlock()
		return []cm.Runnable{h}
	}
	spec := fleetSpec()
	spec.Supervision.ShutdownTimeout = metav1.Duration{Duration: time.Second}
	fleet := cm.NewFleet("fleet", prov, build, spec)
	mgr, log := fleetManager(t, clk, fleet)
	t.Cleanup(free) // registered after the manager's: it runs first, so a failed test does not wait on the hung call
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))

	mu.Lock()
	hb := hung["b"]
	mu.Unlock()
	hb.fail()
	log.waitFor(t, nil, 0, is(cm.ChildFailed, "fleet/b/hung"))
	failed := log.waitFor(t, clk, 100*time.Millisecond, is(cm.ChildFailed, "fleet/b"))
	require.ErrorContains(t, failed.Err, `Shutdown did not return within 1s during a restart`)
	var uerr *supervisor.UnstoppedError
	require.ErrorAs(t, failed.Err, &uerr)
	require.Len(t, uerr.Children, 1)
	require.Contains(t, uerr.Children[0].Stack, "(*hangingCtrl).Shutdown", "the stack of the hung call")
	st, err := mgr.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, supervisor.PhaseRunning, st.Phase)
	require.Zero(t, log.count(func(e cm.Event) bool { return e.Type == cm.Escalated }))
	cs, _ := fleetChild(t, mgr, "fleet/a/hung")
	require.Equal(t, supervisor.StateRunning, cs.State, "the other member runs on")
	cs, _ = fleetChild(t, mgr, "fleet/b/hung")
	require.Equal(t, supervisor.StateStopping, cs.State, "its Shutdown still runs")
	require.Equal(t, int32(1), hb.runs.Load(), "not started beside its hung Shutdown")

	free()
	log.waitFor(t, nil, 0, is(cm.ChildStopped, "fleet/b"))
	require.Equal(t, int32(1), hb.runs.Load(), "stopped, as a spent budget stops it")
}

// A member whose group spends its restart budget stops alone (the fleet's
// OnExhausted is Stop) and says so: Failed, with the group's error, its
// ready metric 0, while the other member runs on. It is not started again
// while Online: a StartChild of its group runs it again, and so does an
// outage and its end.
func TestFleetMemberWhoseGroupStopsItselfIsFailed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config(), "b": b.config()})
	bl := newBuilds()
	spec := fleetSpec()
	spec.Supervision = cm.SupervisionSpec{MaxRestarts: 1, RestartWindow: metav1.Duration{Duration: time.Hour},
		InitialBackoff: metav1.Duration{Duration: time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 2 * time.Millisecond}}
	fleet := cm.NewFleet("fleet", prov, bl.build, spec)
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Its controller cannot start: the restart asked for fails, and so
	// does the one its budget allows.
	crashLoop := func() cm.Event {
		t.Helper()
		since := clk.Now()
		bl.of("b")[0].fail.Store(true)
		require.Error(t, mgr.RestartChild(ctx, "fleet/b/ctrl"))
		failed := log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
			return e.Type == cm.ChildFailed && e.Child == "fleet/b" && !e.Time.Before(since)
		})
		require.ErrorContains(t, failed.Err, "spent its restart budget")
		return log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
			return e.Type == cm.ClusterOffline && e.Child == "fleet/b" && !e.Time.Before(failed.Time)
		})
	}
	off := crashLoop()
	require.ErrorContains(t, off.Err, "spent its restart budget", "the event names why")
	st, _ := fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	require.ErrorContains(t, st.Err, "spent its restart budget")
	v, _ := clusterReady(t, mgr, "fleet", "b")
	require.Zero(t, v)
	log.waitUntil(t, nil, 0, func() bool {
		cs, _ := fleetChild(t, mgr, "fleet/b")
		return cs.State == supervisor.StateStopped
	})
	st, _ = fleet.Cluster("a")
	require.Equal(t, cm.ClusterStateOnline, st.State, "the other member runs on")
	runs := bl.of("b")[0].runs.Load()
	for range 3 { // probes pass: still not started again
		clk.Step(fleetPeriod)
	}
	st, _ = fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	require.Equal(t, runs, bl.of("b")[0].runs.Load())

	// A StartChild of its group: Online again.
	bl.of("b")[0].fail.Store(false)
	require.NoError(t, mgr.StartChild(ctx, "fleet/b"))
	log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
		return e.Type == cm.ClusterOnline && e.Child == "fleet/b" && e.Time.After(off.Time)
	})
	st, _ = fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateOnline, st.State)
	require.NoError(t, st.Err)

	// Failed again; then an outage and its end start it again.
	off = crashLoop()
	bl.of("b")[0].fail.Store(false)
	b.set(memberFailing)
	outage := log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
		return e.Type == cm.ClusterOffline && e.Child == "fleet/b" && e.Time.After(off.Time)
	})
	require.ErrorContains(t, outage.Err, "500", "Offline now for the outage")
	b.set(memberOK)
	log.waitFor(t, clk, fleetPeriod, func(e cm.Event) bool {
		return e.Type == cm.ClusterOnline && e.Child == "fleet/b" && e.Time.After(outage.Time)
	})
	cs, _ := fleetChild(t, mgr, "fleet/b/ctrl")
	require.Equal(t, supervisor.StateRunning, cs.State)
}
