package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// fleetSoakConfig is what the fleet soak runs: members member clusters,
// each a fake API server of its own, and faults a second across them.
type fleetSoakConfig struct {
	members   int
	duration  time.Duration
	interval  time.Duration
	faultRate float64
	seed      uint64
	quiet     bool
	profiles  string // a directory for heap profiles of the two settled states, or ""
}

// fleetSoak runs a Fleet whose member clusters go through outages,
// disengages and engages, config rotations, provider restarts and
// failures of their controllers at a steady rate, and checks, while it
// runs, that a member's controller never runs twice at once and, once the
// faults stop and every member answers and is engaged again, that each is
// Online with its controller Running once, that the fleet lists exactly
// them, and that the shutdown leaves nothing running.
type fleetSoak struct {
	cfg     fleetSoakConfig
	rng     *rand.Rand // the driver's goroutine only
	members []*soakMember
	prov    *soakProvider
	fleet   *cm.Fleet
	mgr     *cm.ControllerManager

	mu         sync.Mutex
	active     map[string]int       // member → its controllers between Run and Shutdown
	current    map[string]*soakCtrl // member → the controller of its latest build
	violations []string

	builds, events                                           atomic.Int64
	outages, engages, disengages, rotations, restarts, fails atomic.Int64
}

// soakMember is a member cluster's fake API server: /readyz answers 500
// while down.
type soakMember struct {
	name    string
	srv     *httptest.Server
	down    atomic.Bool
	token   atomic.Int64 // the config's bearer token: a rotation bumps it
	engaged bool         // the provider's inventory: fleetSoak.mu
}

func (m *soakMember) config() *rest.Config {
	return &rest.Config{Host: m.srv.URL, BearerToken: fmt.Sprintf("token-%d", m.token.Load())}
}

// soakProvider hands its Run's engage and disengage to the driver.
type soakProvider struct {
	mu        sync.Mutex
	engage    func(string, *rest.Config) error
	disengage func(string)
	initial   func() map[string]*rest.Config
}

func (p *soakProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.engage, p.disengage = engage, disengage
	p.mu.Unlock()
	for name, cfg := range p.initial() {
		if err := engage(name, cfg); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func (p *soakProvider) get() (func(string, *rest.Config) error, func(string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.engage, p.disengage
}

// soakCtrl is a member's controller: it counts itself active from Run to
// Shutdown, and its failure reporter is the driver's to call.
type soakCtrl struct {
	s      *fleetSoak
	member string
	mu     sync.Mutex
	report func(error)
}

func (c *soakCtrl) Name() string { return "ctrl" }
func (c *soakCtrl) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	c.s.change(c.member, 1)
	return nil
}
func (c *soakCtrl) Shutdown(context.Context) { c.s.change(c.member, -1) }
func (c *soakCtrl) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "ctrl", Healthy: true}
}

func (c *soakCtrl) fail() {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	if report != nil {
		report(errors.New("soak: injected failure"))
	}
}

// soakStore is a member's store: it recovers at once.
type soakStore struct{}

func (soakStore) Name() string                  { return "store" }
func (soakStore) Recover(context.Context) error { return nil }

func (s *fleetSoak) change(member string, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[member] += d
	switch n := s.active[member]; {
	case n > 1:
		s.violations = append(s.violations, fmt.Sprintf("%s: %d controllers of the member run at once", member, n))
	case n < 0:
		s.violations = append(s.violations, fmt.Sprintf("%s: a Shutdown without its Run", member))
	}
}

func (s *fleetSoak) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func newFleetSoak(cfg fleetSoakConfig) (*fleetSoak, error) {
	if cfg.members < 1 {
		return nil, fmt.Errorf("-fleet %d: at least one member cluster", cfg.members)
	}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	s := &fleetSoak{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed>>1)), active: map[string]int{}, current: map[string]*soakCtrl{}}
	for i := range cfg.members {
		m := &soakMember{name: fmt.Sprintf("member-%03d", i), engaged: true}
		m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" && m.down.Load() {
				http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte("ok"))
		}))
		s.members = append(s.members, m)
	}
	s.prov = &soakProvider{initial: func() map[string]*rest.Config {
		// A restarted provider engages what the inventory holds now:
		// the members the driver has engaged.
		out := map[string]*rest.Config{}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range s.members {
			if m.engaged {
				out[m.name] = m.config()
			}
		}
		return out
	}}
	spec := cm.FleetSpec{
		ProbePeriod: metav1.Duration{Duration: 100 * time.Millisecond}, ProbeTimeout: metav1.Duration{Duration: 100 * time.Millisecond},
		FailureThreshold: metav1.Duration{Duration: 300 * time.Millisecond}, SuccessThreshold: metav1.Duration{Duration: 200 * time.Millisecond},
		Supervision: cm.SupervisionSpec{
			MaxRestarts: 1000, RestartWindow: metav1.Duration{Duration: time.Second},
			InitialBackoff: metav1.Duration{Duration: time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 10 * time.Millisecond},
			ShutdownTimeout: metav1.Duration{Duration: 10 * time.Second},
		},
	}
	s.fleet = cm.NewFleet("fleet", s.prov, s.build, spec)
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "fleet-soak",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	s.mgr = mgr
	mgr.Add(s.fleet)
	mgr.Subscribe(func(cm.Event) { s.events.Add(1) })
	return s, nil
}

func (s *fleetSoak) build(c cm.Cluster) []cm.Runnable {
	s.builds.Add(1)
	ctrl := &soakCtrl{s: s, member: c.Name()}
	s.mu.Lock()
	s.current[c.Name()] = ctrl
	s.mu.Unlock()
	return []cm.Runnable{cm.StoreChild(soakStore{}), ctrl}
}

func (s *fleetSoak) close() {
	for _, m := range s.members {
		m.srv.Close()
	}
}

// fault injects one fault, chosen at random.
func (s *fleetSoak) fault(ctx context.Context) {
	m := s.members[s.rng.IntN(len(s.members))]
	engage, disengage := s.prov.get()
	switch r := s.rng.IntN(100); {
	case r < 35: // an outage begins or ends
		if !m.down.Load() {
			s.outages.Add(1)
		}
		m.down.Store(!m.down.Load())
	case r < 55: // disengaged, or engaged again
		if engage == nil {
			return
		}
		s.mu.Lock()
		m.engaged = !m.engaged
		now := m.engaged
		s.mu.Unlock()
		if now {
			s.engages.Add(1)
			_ = engage(m.name, m.config()) // refused only by a provider's Run that ended: the new one engages it
		} else {
			s.disengages.Add(1)
			disengage(m.name)
		}
	case r < 70: // its config rotated: the member's subtree is built again
		if engage == nil || !m.engaged {
			return
		}
		s.rotations.Add(1)
		m.token.Add(1)
		_ = engage(m.name, m.config())
	case r < 97: // its controller fails: restarted within its group's budget
		s.mu.Lock()
		ctrl := s.current[m.name]
		s.mu.Unlock()
		if ctrl != nil {
			s.fails.Add(1)
			ctrl.fail()
		}
	default: // the provider restarted: the members are kept
		s.restarts.Add(1)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.mgr.RestartChild(rctx, "fleet/"+cm.FleetProviderChild); err != nil && ctx.Err() == nil {
			s.violate("RestartChild of the provider: %v", err)
		}
	}
}

// settle ends every outage, engages every member, and waits until each is
// Online with its controller Running, and nothing else is listed.
func (s *fleetSoak) settle(ctx context.Context) error {
	engage, _ := s.prov.get()
	for _, m := range s.members {
		m.down.Store(false)
		s.mu.Lock()
		m.engaged = true
		s.mu.Unlock()
		if err := engage(m.name, m.config()); err != nil {
			return fmt.Errorf("settle: engage %s: %w", m.name, err)
		}
	}
	var why string
	for {
		if why = s.settled(ctx); why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("settle: %s", why)
		case <-time.After(50 * time.Millisecond): // a program's poll
		}
	}
}

// settled says why the fleet is not settled yet, or "".
func (s *fleetSoak) settled(ctx context.Context) string {
	listed := s.fleet.Clusters()
	if len(listed) != len(s.members) {
		return fmt.Sprintf("%d clusters listed, want %d", len(listed), len(s.members))
	}
	st, err := s.mgr.Status(ctx)
	if err != nil {
		return err.Error()
	}
	for _, c := range listed {
		if c.State != cm.ClusterStateOnline {
			return fmt.Sprintf("%s is %s", c.Name, c.State)
		}
		if cs, ok := st.Child("fleet/" + c.Name + "/ctrl"); !ok || cs.State != supervisor.StateRunning {
			return fmt.Sprintf("fleet/%s/ctrl is %q", c.Name, cs.State)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if n := s.active[m.name]; n != 1 {
			return fmt.Sprintf("%s: %d controllers active", m.name, n)
		}
	}
	return ""
}

// runFleetSoak is the -fleet mode of the command.
func runFleetSoak(ctx context.Context, cfg fleetSoakConfig) error {
	goroutinesBefore := runtime.NumGoroutine()
	s, err := newFleetSoak(cfg)
	if err != nil {
		return err
	}
	defer s.close()
	startCtx, cancelStart := context.WithTimeout(ctx, time.Minute)
	err = s.mgr.Start(startCtx, 0)
	cancelStart()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// Settled before the faults: every member Online. The same settle at
	// the end must find the same goroutines and about the same heap, or
	// something of the members that came and went was left behind.
	firstCtx, cancelFirst := context.WithTimeout(ctx, 2*time.Minute)
	err = s.settle(firstCtx)
	cancelFirst()
	if err != nil {
		return fmt.Errorf("before the faults: %w", err)
	}
	heap0, goroutines0 := settledFigures()
	if cfg.profiles != "" {
		if err := writeHeapProfile(cfg.profiles, 0); err != nil {
			return err
		}
	}
	if !cfg.quiet {
		fmt.Printf("fleet soak: %d member clusters, %.0f faults/s (outages, disengages and engages, rotations, controller failures, provider restarts), for %s, seed %d\n",
			cfg.members, cfg.faultRate, cfg.duration, s.cfg.seed)
	}
	fmt.Printf("%8s %10s %10s %8s %7s %7s %8s %8s %9s %9s %7s %8s %5s\n",
		"elapsed", "heap-live", "goroutines", "engaged", "online", "offline", "builds", "outages", "disengage", "rotations", "fails", "events/s", "viol")
	begin, prevAt, prevEvents := time.Now(), time.Now(), int64(0)
	print := func(now time.Time) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		states := map[cm.ClusterState]int{}
		listed := s.fleet.Clusters()
		for _, c := range listed {
			states[c.State]++
		}
		ev := s.events.Load()
		s.mu.Lock()
		viol := len(s.violations)
		s.mu.Unlock()
		fmt.Printf("%8s %9.1fM %10d %8d %7d %7d %8d %8d %9d %9d %7d %8.0f %5d\n",
			now.Sub(begin).Round(time.Second), mib(ms.HeapAlloc), runtime.NumGoroutine(), len(listed),
			states[cm.ClusterStateOnline], states[cm.ClusterStateOffline], s.builds.Load(), s.outages.Load(),
			s.disengages.Load(), s.rotations.Load(), s.fails.Load(), float64(ev-prevEvents)/now.Sub(prevAt).Seconds(), viol)
		prevAt, prevEvents = now, ev
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	faults := time.NewTicker(time.Duration(float64(time.Second) / cfg.faultRate))
	defer faults.Stop()
	tick := time.NewTicker(cfg.interval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-faults.C:
			s.fault(runCtx)
		case now := <-tick.C:
			print(now)
		case <-runCtx.Done():
			break loop
		}
	}
	print(time.Now())

	settleCtx, cancelSettle := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelSettle()
	if err := s.settle(settleCtx); err != nil {
		return err
	}
	heap1, goroutines1 := settledFigures()
	if cfg.profiles != "" {
		if err := writeHeapProfile(cfg.profiles, time.Since(begin)); err != nil {
			return err
		}
	}
	fmt.Printf("settled, every member Online: before the faults %.1fM live heap and %d goroutines, after them %.1fM and %d\n",
		mib(heap0), goroutines0, mib(heap1), goroutines1)
	ready, err := readySeries(s.mgr)
	if err != nil {
		return err
	}
	if want := len(s.members); ready != want {
		s.violate("%d controllermanager_cluster_ready series after settling, want %d (one per member)", ready, want)
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), time.Minute)
	defer cancelShutdown()
	s.mgr.ShutdownAndWait(shutdownCtx)
	if err := s.mgr.Err(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	s.mu.Lock()
	for name, n := range s.active {
		if n != 0 {
			s.violations = append(s.violations, fmt.Sprintf("%s: %d controllers active after the shutdown", name, n))
		}
	}
	violations := slices.Clone(s.violations)
	s.mu.Unlock()
	s.close()
	left := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); left > goroutinesBefore && time.Now().Before(deadline); left = runtime.NumGoroutine() {
		time.Sleep(50 * time.Millisecond) // a program, not a test: polling the count is all there is
	}
	sort.Strings(violations)
	for _, v := range violations {
		fmt.Println("violation:", v)
	}
	if !cfg.quiet {
		fmt.Printf("%d builds, %d outages, %d engages, %d disengages, %d rotations, %d controller failures, %d provider restarts, %d events\n",
			s.builds.Load(), s.outages.Load(), s.engages.Load(), s.disengages.Load(), s.rotations.Load(), s.fails.Load(), s.restarts.Load(), s.events.Load())
	}
	fmt.Printf("goroutines: %d before the manager, %d after its shutdown\n", goroutinesBefore, left)
	if len(violations) > 0 || left > goroutinesBefore {
		return fmt.Errorf("%d invariants broken, %d goroutines left over", len(violations), left-goroutinesBefore)
	}
	fmt.Println("fleet soak: every invariant held")
	return nil
}

// settledFigures is the live heap (after a GC) and the goroutines, once
// the idle connections of the probes' clients have been given a moment
// to settle (a program's poll, not a test's).
func settledFigures() (uint64, int) {
	time.Sleep(time.Second)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// readySeries counts the fleet's controllermanager_cluster_ready series.
func readySeries(m *cm.ControllerManager) (int, error) {
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "cluster_ready") {
			n += len(mf.GetMetric())
		}
	}
	return n, nil
}
