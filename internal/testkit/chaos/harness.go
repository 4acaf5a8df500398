package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
)

// Config says how many children a Harness runs and how hard it shakes them.
type Config struct {
	// Controllers, Stores and Webhooks are how many children of each kind
	// the manager starts with.
	Controllers, Stores, Webhooks int
	// FaultRate is how many faults per second strike the manager's
	// children, one child at a time, chosen at random.
	FaultRate float64
	// LifecycleRate is how many lifecycle messages per second are sent.
	LifecycleRate float64
	// AdmissionClients is how many clients post AdmissionReviews at once.
	AdmissionClients int
	// AdmissionRate is how many reviews per second each client posts, at
	// most; 0: each as fast as it is answered.
	AdmissionRate float64
	// MinFaultGap is the least time between two faults of one child, so
	// that a child stays within its restart budget (see Supervision).
	// Default 1.5s.
	MinFaultGap time.Duration
	// Supervision is the manager's. Its zero fields take the harness's
	// defaults: a budget of 8 restarts within 3s, backoff from 20ms to
	// 200ms, a probe every 250ms answered within 1s, 2 bad probes in a row
	// a failure, ShutdownTimeout 10s.
	Supervision cm.SupervisionSpec
	// StartTimeout bounds the manager's start and every restart's start
	// call. Default 1m.
	StartTimeout time.Duration
	// Seed seeds every random choice; 0 picks one from the time.
	Seed uint64
	// Logger is the manager's; nil discards its logs.
	Logger *slog.Logger
	// Options are more options for the manager.
	Options []cm.Option
}

func (cfg *Config) fill() {
	if cfg.MinFaultGap <= 0 {
		cfg.MinFaultGap = 1500 * time.Millisecond
	}
	sup := &cfg.Supervision
	setCount := func(v *int32, def int32) {
		if *v == 0 {
			*v = def
		}
	}
	setDuration := func(v *metav1.Duration, def time.Duration) {
		if v.Duration == 0 {
			v.Duration = def
		}
	}
	setCount(&sup.MaxRestarts, 8)
	setDuration(&sup.RestartWindow, 3*time.Second)
	setDuration(&sup.InitialBackoff, 20*time.Millisecond)
	setDuration(&sup.MaxBackoff, 200*time.Millisecond)
	setDuration(&sup.HealthInterval, 250*time.Millisecond)
	setDuration(&sup.HealthTimeout, time.Second)
	setCount(&sup.UnhealthyThreshold, 2)
	setDuration(&sup.ShutdownTimeout, 10*time.Second)
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = time.Minute
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// handleFailureThreshold is how many failed Handle calls in a row fail a
// webhook of the harness (cm.WebhookConfig.FailureThreshold).
const handleFailureThreshold = 3

// Harness is a manager under chaos, with its children and the checks.
type Harness struct {
	cfg    Config
	mgr    *cm.ControllerManager
	server *httptest.Server
	client *http.Client

	rngMu sync.Mutex
	rng   *rand.Rand

	calmed, released         chan struct{}
	calmOnce, releaseOnce    sync.Once
	unsubscribe              func()
	faultSeq, webhookRequest atomic.Uint64

	// mu guards the registry and the checker's state, the children's
	// tallies included. A child's own mu may be taken under it, never the
	// other way round.
	mu          sync.Mutex
	live        []*child          // in the manager: added and not removed
	retired     []*child          // the last children removed, oldest first, not yet checked and forgotten
	byName      map[string]*child // live and retired children, and those being added, by name
	byPath      map[string]*child // the webhooks among them, by path
	nextID      int               // children made
	failedAdds  []*child          // children whose AddChild failed (after an escalation)
	pending     *child            // a ChildFailed's budget decision waits for the next event
	pendingMust bool              // ... and it must be an Escalated of that child
	pendingAt   time.Time
	escalated   string // the child that escalated, if one did
	ended       bool   // the manager has stopped
	stoppedByUs []*child
	initial     int // children at the start
	adding      int // AddChild requests in flight
	settledAt   time.Time
	lastEvent   time.Time // when the checker last received an event

	vmu        sync.Mutex
	violations []string
	violated   int

	stats stats
}

// tally is the checker's account of one child, built from the events.
type tally struct {
	restarted     int // ChildRestarted events
	failed        int // ChildFailed events
	lastFailedInc int // the incarnation of the last ChildFailed
	budget        []time.Time
	inFlight      int          // lifecycle requests naming it, not yet answered
	expect        map[int]bool // incarnations that must fail: a failure was reported from them untouched
	removed       bool         // a ChildRemoved was seen
	removedAt     int          // its Restarts
	removeSent    time.Time    // when RemoveChild was sent for it
	ok200         int          // admission requests answered 200
	timedOut      int          // of those, denials at the request's deadline (Result.Code 504)
	recent        [8]string    // its last events, for the messages of violations
	nrecent       int
}

// note keeps e among c's last events.
func (t *tally) note(e string) {
	t.recent[t.nrecent%len(t.recent)] = e
	t.nrecent++
}

// history is c's last events, oldest first.
func (t *tally) history() string {
	var parts []string
	for i := max(0, t.nrecent-len(t.recent)); i < t.nrecent; i++ {
		parts = append(parts, t.recent[i%len(t.recent)])
	}
	return strings.Join(parts, "; ")
}

// New builds a manager (not started) and its children.
func New(cfg Config) (*Harness, error) {
	cfg.fill()
	h := &Harness{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)),
		calmed:   make(chan struct{}),
		released: make(chan struct{}),
		byName:   map[string]*child{},
		byPath:   map[string]*child{},
	}
	opts := append([]cm.Option{cm.WithLogger(cfg.Logger), cm.WithEventBuffer(1 << 20)}, cfg.Options...)
	sup := cfg.Supervision
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: &sup}, "", opts...)
	if err != nil {
		return nil, err
	}
	h.mgr = mgr
	h.unsubscribe = mgr.Subscribe(h.onEvent)
	var stores []cm.Store
	var others []cm.Runnable
	for _, k := range []struct {
		kind actors.Kind
		n    int
	}{{actors.KindStore, cfg.Stores}, {actors.KindController, cfg.Controllers}, {actors.KindWebhook, cfg.Webhooks}} {
		for range k.n {
			c := h.newChild(k.kind)
			h.live = append(h.live, c)
			switch v := c.value().(type) {
			case Store:
				stores = append(stores, v)
			case cm.Runnable:
				others = append(others, v)
			}
		}
	}
	h.initial = len(h.live)
	mgr.AddStore(stores...)
	mgr.Add(others...)
	h.server = httptest.NewServer(mgr.WebhookHandler(cm.WebhookConfig{FailureThreshold: handleFailureThreshold}))
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return h, nil
}

// Manager is the manager under chaos.
func (h *Harness) Manager() *cm.ControllerManager { return h.mgr }

// Seed is the seed of the harness's random choices.
func (h *Harness) Seed() uint64 { return h.cfg.Seed }

// newChild makes and registers a child of kind with a fresh name.
func (h *Harness) newChild(kind actors.Kind) *child {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextID++
	c := &child{h: h, kind: kind, name: fmt.Sprintf("%s-%04d", kind, h.nextID)}
	if kind == actors.KindWebhook {
		c.path = "/chaos/" + c.name
		h.byPath[c.path] = c
	}
	h.byName[c.name] = c
	return c
}

// Start starts the manager.
func (h *Harness) Start(ctx context.Context) error {
	return h.mgr.Start(ctx, h.cfg.StartTimeout)
}

// Run shakes the manager for d: faults at FaultRate, lifecycle messages at
// LifecycleRate, admission requests from AdmissionClients, and a scraper
// of health, status and metrics. It returns once all of them have stopped.
func (h *Harness) Run(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { h.injectFaults(ctx) })
	wg.Go(func() { h.sendLifecycle(ctx) })
	for range h.cfg.AdmissionClients {
		wg.Go(func() { h.postReviews(ctx) })
	}
	wg.Go(func() { h.scrape(ctx) })
	wg.Wait()
}

// Close releases what the harness holds besides the manager: its HTTP
// server and client, and its subscription. Shut the manager down first.
func (h *Harness) Close() {
	h.Release()
	h.calm()
	h.server.Close()
	h.client.CloseIdleConnections()
	h.unsubscribe()
}

// calm ends the faults (closing calmed the first time): hung calls return,
// faults not yet struck never will. It reports whether the chaos had ended
// already.
func (h *Harness) calm() bool {
	select {
	case <-h.calmed:
		return true
	default:
		return false
	}
}

// Calm ends the faults.
func (h *Harness) Calm() { h.calmOnce.Do(func() { close(h.calmed) }) }

// Release returns the Shutdown calls held by HoldShutdowns.
func (h *Harness) Release() { h.releaseOnce.Do(func() { close(h.released) }) }

// HoldShutdowns makes the next Shutdown of n children chosen at random hang,
// whatever its context says, until Release; it returns their names.
func (h *Harness) HoldShutdowns(n int) []string {
	h.mu.Lock()
	live := slices.Clone(h.live)
	h.mu.Unlock()
	h.rngMu.Lock()
	h.rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	h.rngMu.Unlock()
	var names []string
	for _, c := range live[:min(n, len(live))] {
		c.mu.Lock()
		c.shutdown = shutdownHeld
		c.mu.Unlock()
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

// violate records a broken invariant.
func (h *Harness) violate(format string, args ...any) {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	h.violated++
	if len(h.violations) < 100 {
		h.violations = append(h.violations, fmt.Sprintf(format, args...))
	}
}

// Violations returns the invariants broken so far (the first hundred) and
// how many there were.
func (h *Harness) Violations() ([]string, int) {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	return slices.Clone(h.violations), h.violated
}

// strike makes the Fault a child produces for kind, in its incarnation n.
func (h *Harness) strike(c *child, kind FaultKind, n int) *Fault {
	h.stats.struck[kind].Add(1)
	return &Fault{Seq: h.faultSeq.Add(1), Child: c.name, Kind: kind, Inc: n, At: time.Now()}
}

func (h *Harness) float() float64 {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.Float64()
}

func (h *Harness) intN(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// between returns a duration in [lo, hi).
func (h *Harness) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.float()*float64(hi-lo))
}

// randomLive returns a child in the manager, or nil.
func (h *Harness) randomLive(kind actors.Kind) *child {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.randomLiveLocked(kind)
}

func (h *Harness) randomLiveLocked(kind actors.Kind) *child {
	if len(h.live) == 0 {
		return nil
	}
	for range 20 {
		c := h.live[h.intN(len(h.live))]
		if kind == "" || c.kind == kind {
			return c
		}
	}
	return nil
}

// every calls fn at rate per second until ctx ends; a rate <= 0 never.
func every(ctx context.Context, rate float64, fn func()) {
	if rate <= 0 {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
		}
	}
}
