package statespace

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
)

// A fleet scenario (WithFleet) adds a Fleet "fleet" at the root, whose
// provider the sequence drives: member clusters "c0".."c<n-1>", each a
// fake API server that answers /readyz as the sequence says, and one
// journalled controller per member, "fleet/c<i>/fctrl" (with
// Scenario.FleetStore, half the fleets, a store "fleet/c<i>/fstore"
// before it, whose Recover waits for the member's API server). Its steps engage,
// disengage and rotate members, take their API servers down and up, fail
// the provider, and aim the usual steps (failures, knobs, lifecycle
// requests) at the members' controllers and groups. The member
// controllers are children like any other: every invariant holds for them
// (one incarnation at a time, fencing by their shard's Lease, guards, the
// stop of each incarnation); the books are kept by a member whose group
// was never built again. The fleet's own promises are checked too
// (docs/fleet.md): FleetContextOverlap, DisengagedRan, OfflineRan,
// OfflineLate, OnlineWhileDown, OnlineEarly, OutageUnsaid, ClusterWritePassed, ClusterNotEnded.
const (
	fleetName             = "fleet"
	fleetCtrl             = "fctrl"
	fleetStore            = "fstore"               // with Scenario.FleetStore
	FleetProbePeriod      = 100 * time.Millisecond // and its ProbeTimeout: a loaded machine's probes take tens of ms
	FleetFailureThreshold = 400 * time.Millisecond
	FleetSuccessThreshold = 200 * time.Millisecond
)

// The fleet's actions (WithFleet); Step.Child names the member ("c0").
const (
	// DoEngage engages the member with its current config (a no-op when
	// engaged with it); DoRotate engages it with a new one (its
	// credentials rotated); DoDisengage disengages it.
	DoEngage    Action = "Engage"
	DoRotate    Action = "Rotate"
	DoDisengage Action = "Disengage"
	// DoClusterDown makes the member's API server fail its probes;
	// DoClusterUp answers them again.
	DoClusterDown Action = "ClusterDown"
	DoClusterUp   Action = "ClusterUp"
	// DoFailProvider makes the provider's Run return an error: a failure
	// of "fleet/provider", restarted, whose members stay engaged.
	DoFailProvider Action = "FailProvider"
)

// fleetPath is the path of member's controller.
func fleetPath(member string) string { return fleetName + "/" + member + "/" + fleetCtrl }

// fleetStorePath is the path of member's store (Scenario.FleetStore).
func fleetStorePath(member string) string { return fleetName + "/" + member + "/" + fleetStore }

// fleetMember returns the member a path is in ("fleet/c0/fctrl",
// "fleet/c0": "c0"), or "".
func fleetMember(path string) string {
	rest, ok := strings.CutPrefix(path, fleetName+"/")
	if !ok {
		return ""
	}
	m, _, _ := strings.Cut(rest, "/")
	if m == "provider" {
		return ""
	}
	return m
}

// inFleet reports whether path is the fleet or under it.
func inFleet(path string) bool { return within(path, fleetName) }

// WithFleet returns s with a fleet of one to three members, all engaged
// before Start, and 4 to 12 fleet steps at random places after its Start,
// drawn from a stream of their own seeded by s.Seed, so that the other
// steps stay Generate's. In a tree the fleet is the root's last child:
// the tree's checks judge its members' restarts too, a member's return
// Online and a new subtree being causes of their own.
func WithFleet(s Scenario) Scenario {
	r := rand.New(rand.NewPCG(s.Seed^0x2545f4914f6cdd1d, s.Seed^0x9e3779b97f4a7c15))
	s.Fleet = 1 + r.IntN(3)
	member := func() string { return fmt.Sprintf("c%d", r.IntN(s.Fleet)) }
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo))) }
	s.Steps = insertAfterStart(s.Steps, r, 4+r.IntN(9), func() []Step {
		var st Step
		switch x := r.IntN(100); {
		case x < 12:
			st = Step{Do: DoEngage, Child: member()}
		case x < 24:
			st = Step{Do: DoRotate, Child: member()}
		case x < 34:
			st = Step{Do: DoDisengage, Child: member()}
		case x < 46:
			st = Step{Do: DoClusterDown, Child: member()}
		case x < 56:
			st = Step{Do: DoClusterUp, Child: member()}
		case x < 60:
			st = Step{Do: DoFailProvider}
		case x < 70:
			st = Step{Do: DoFail, Child: fleetPath(member())}
		case x < 78:
			k := Knobs{}
			switch r.IntN(4) {
			case 0:
				k.StartDelay = between(20*time.Millisecond, 200*time.Millisecond)
				k.StartIgnoresCtx = r.IntN(2) == 0
			case 1:
				k.ShutdownDelay = between(10*time.Millisecond, 200*time.Millisecond)
				k.ShutdownIgnoresCtx = r.IntN(2) == 0
			case 2:
				k.StartFails = true
			}
			st = Step{Do: DoKnobs, Child: fleetPath(member()), Knobs: k}
		default:
			do := []Action{DoRestart, DoStop, DoStartChild}[r.IntN(3)]
			target := []string{fleetPath(member()), fleetName + "/" + member(), fleetName}[r.IntN(3)]
			if target == fleetName && do != DoRestart {
				target = fleetName + "/" + member()
			}
			st = Step{Do: do, Child: target}
		}
		wait := between(5*time.Millisecond, 150*time.Millisecond)
		if st.Do == DoClusterDown || st.Do == DoClusterUp {
			// Long enough, mostly, for the member to go Offline or Online.
			wait = between(100*time.Millisecond, 3*FleetFailureThreshold)
		}
		return []Step{st, {Do: DoWait, Dur: wait}}
	})
	// Drawn last, so that the steps stay what they were before it: half
	// the fleets' members hold a store's Recover while their API server
	// is down (memberStore).
	if r.IntN(2) == 0 {
		s.FleetStore = between(50*time.Millisecond, time.Second)
	}
	// Drawn after it, for the same reason: in a third of the fleets, an
	// API server that comes back goes down again about as the fleet starts
	// the member's group (it answered for SuccessThreshold: its StartChild,
	// a store's Recover first) or has just said it Online. The fleet then
	// says Online while it is down (online-while-down judges how stale),
	// or gives the start up and stops the group with a Recover waiting
	// (member-running judges the store with the controller).
	if r.IntN(3) == 0 {
		s.Steps = flap(s.Steps, func() time.Duration {
			return between(FleetSuccessThreshold/2, FleetSuccessThreshold+s.FleetStore+3*FleetProbePeriod)
		}, func() time.Duration { return between(100*time.Millisecond, 3*FleetFailureThreshold) })
	}
	s.Name += "+fleet"
	return s
}

// flap follows every ClusterUp and its wait in steps with a ClusterDown of
// the same member: the wait between them drawn by back, the wait after
// by after.
func flap(steps []Step, back, after func() time.Duration) []Step {
	var out []Step
	for i := 0; i < len(steps); i++ {
		st := steps[i]
		out = append(out, st)
		if st.Do != DoClusterUp || i+1 >= len(steps) || steps[i+1].Do != DoWait {
			continue
		}
		i++
		out = append(out, Step{Do: DoWait, Dur: back()}, Step{Do: DoClusterDown, Child: st.Child}, Step{Do: DoWait, Dur: after()})
	}
	return out
}

// HasFleet reports whether s adds a fleet (WithFleet).
func HasFleet(s Scenario) bool { return s.Fleet > 0 }

// fleetState is a fleet sequence's provider, its members' API servers and
// what the fleet gave build.
type fleetState struct {
	r       *runner
	servers map[string]*memberServer

	mu        sync.Mutex
	engage    func(string, *rest.Config) error // the running provider's, or nil
	disengage func(string)
	runCtx    context.Context      // the running provider's Run's: its engage refuses once it has ended
	fail      chan struct{}        // closed by DoFailProvider: the running Run fails
	want      map[string]int       // the members to engage, each with its config's generation
	engaged   map[string]bool      // what the provider engaged and has not disengaged
	builds    map[string][]build   // every build of each member, in order
	downSince map[string]time.Time // members whose API server fails its probes
	// What the checks judged (Result): ClusterOffline events of a member
	// down, ClusterDisengaged events, Clusters found ended at the end.
	offlineJudged, disengagedJudged, endedJudged int
	judged                                       map[string]bool // the events counted, by kind/member/time
	// The outages OfflineLate judged, by member and the start of their
	// window, and how many; r.mu guards them.
	lateSeen   map[string]bool
	lateJudged int
	// The ClusterOnline events OnlineWhileDown has judged, and how many
	// of them came while the member's API server was down; r.mu guards
	// them.
	onlineSeen       map[string]bool
	onlineDownJudged int
	// The ClusterOnline events OnlineEarly has judged, and how many; r.mu
	// guards them.
	earlySeen   map[string]bool
	earlyJudged int
	// The stops of a member's group followed by a start of it that
	// OutageUnsaid has judged, and how many; r.mu guards them.
	outageSeen   map[string]bool
	outageJudged int
}

// build is one call of the fleet's build for a member.
type build struct {
	cluster cm.Cluster
	gen     int
	at      time.Time
}

// memberServer is a member cluster's API server: /readyz answers 200 or
// 500; any other request is counted (a write that reached it) and
// answered 200.
type memberServer struct {
	srv    *httptest.Server
	down   atomic.Bool
	writes atomic.Int64
	// What the offline-late check reads without the fleet's lock (it runs
	// under r.mu, which the provider's calls may take inside f.mu): when
	// the server went down (UnixNano, 0 while up), and whether the
	// sequence's provider has the member engaged.
	downAt  atomic.Int64
	engaged atomic.Bool

	mu sync.Mutex
	up chan struct{} // closed when the server answers again; nil while it does
	// outages is every span the server was down, in order, the last one
	// open (to zero) while it is: what online-while-down judges a
	// ClusterOnline by, read under r.mu (mu is a leaf).
	outages []outage
}

// outage is a span a member's API server failed its probes.
type outage struct{ from, to time.Time } // to is zero while it lasts

// setDown makes the server fail its probes from at; false if it did
// already.
func (m *memberServer) setDown(at time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.down.CompareAndSwap(false, true) {
		return false
	}
	m.downAt.Store(at.UnixNano())
	m.outages = append(m.outages, outage{from: at})
	return true
}

// downThroughout reports whether the server was down all of [a, b].
func (m *memberServer) downThroughout(a, b time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.outages {
		if !o.from.After(a) && (o.to.IsZero() || !o.to.Before(b)) {
			return true
		}
	}
	return false
}

// downAround returns since when the server had been down at t, if it was.
func (m *memberServer) downAround(t time.Time) (time.Time, bool) {
	o, ok := m.outageAt(t)
	return o.from, ok
}

// outageAt returns the outage the server was in at t, if it was.
func (m *memberServer) outageAt(t time.Time) (outage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.outages {
		if !o.from.After(t) && (o.to.IsZero() || o.to.After(t)) {
			return o, true
		}
	}
	return outage{}, false
}

// whenUp returns a channel closed once the server answers its probes
// again, or nil if it does now.
func (m *memberServer) whenUp() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.down.Load() {
		return nil
	}
	if m.up == nil {
		m.up = make(chan struct{})
	}
	return m.up
}

func newMemberServer() *memberServer {
	m := &memberServer{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/readyz" || req.URL.Path == "/healthz" || req.URL.Path == "/livez" {
			if m.down.Load() {
				http.Error(w, "statespace: member down", http.StatusInternalServerError)
				return
			}
			_, _ = w.Write([]byte("ok"))
			return
		}
		if req.Method != http.MethodGet {
			m.writes.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	return m
}

// config is member's config of generation gen: a rotation changes its
// bearer token.
func (f *fleetState) config(member string, gen int) *rest.Config {
	return &rest.Config{Host: f.servers[member].srv.URL, BearerToken: fmt.Sprintf("token-%s-%d", member, gen)}
}

// newFleetState is r's fleet with no member yet.
func newFleetState(r *runner) *fleetState {
	return &fleetState{r: r, servers: map[string]*memberServer{}, fail: make(chan struct{}),
		want: map[string]int{}, engaged: map[string]bool{}, builds: map[string][]build{},
		downSince: map[string]time.Time{}, judged: map[string]bool{}, lateSeen: map[string]bool{}, onlineSeen: map[string]bool{}, earlySeen: map[string]bool{}, outageSeen: map[string]bool{}}
}

// addFleet adds the fleet to the manager, every member to be engaged.
func (r *runner) addFleet() {
	f := newFleetState(r)
	for i := range r.sc.Fleet {
		name := fmt.Sprintf("c%d", i)
		f.servers[name] = newMemberServer()
		f.want[name] = 1
		path := fleetPath(name)
		r.children[path] = newChild(path, "controller", r.journal, r.release)
		if r.sc.FleetStore > 0 {
			sp := fleetStorePath(name)
			r.children[sp] = newChild(sp, "store", r.journal, r.release)
			r.order[fleetName+"/"+name] = []string{fleetStore, fleetCtrl} // stores first, as in any group
		}
	}
	r.fleet = f
	r.order[""] = append(r.order[""], fleetName)
	spec := cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: FleetProbePeriod},
		ProbeTimeout:     metav1.Duration{Duration: FleetProbePeriod},
		FailureThreshold: metav1.Duration{Duration: FleetFailureThreshold},
		SuccessThreshold: metav1.Duration{Duration: FleetSuccessThreshold},
	}
	r.m.Add(cm.NewFleet(fleetName, fleetProvider{f}, f.build, spec))
}

// build is the fleet's build: the member's journalled controller, the same
// child (and journal) at every build, so that two subtrees of one member
// running at once are two incarnations at once. The Cluster of any
// earlier build of the member must have ended first (docs/fleet.md,
// Rotation: "The old Cluster.Context() ends first").
func (f *fleetState) build(c cm.Cluster) []cm.Runnable {
	now := time.Now()
	f.mu.Lock()
	gen := f.want[c.Name()]
	for _, b := range f.builds[c.Name()] {
		if b.cluster == c {
			continue // the same Cluster built again (its group removed by hand)
		}
		if b.cluster.Context().Err() == nil {
			f.r.violate(Violation{Invariant: FleetContextOverlap, Child: fleetName + "/" + c.Name(), Time: now,
				Detail: fmt.Sprintf("build called at %s for config generation %d while the Cluster built at %s (generation %d) had not ended", stamp(now), gen, stamp(b.at), b.gen)})
		}
	}
	f.builds[c.Name()] = append(f.builds[c.Name()], build{cluster: c, gen: gen, at: now})
	f.mu.Unlock()
	f.r.mu.Lock()
	ch, st := f.r.children[fleetPath(c.Name())], f.r.children[fleetStorePath(c.Name())]
	f.r.mu.Unlock()
	if st != nil {
		return []cm.Runnable{memberStore{Store{st}, f.servers[c.Name()], f.r.sc.FleetStore}, Controller{ch}}
	}
	return []cm.Runnable{Controller{ch}}
}

// memberStore is a member's journalled store whose Recover is an
// informer's cache sync: it lists for sync, then waits until the
// member's API server answers, or its context ends, or the sequence
// releases its hung calls.
type memberStore struct {
	Store
	srv  *memberServer
	sync time.Duration
}

// Recover is the store's start call.
func (s memberStore) Recover(ctx context.Context) error {
	return s.startCallThen(ctx, func() error {
		if err := s.wait(ctx, s.sync, false); err != nil {
			return err
		}
		for {
			up := s.srv.whenUp()
			if up == nil {
				return nil
			}
			select {
			case <-up:
			case <-s.release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
}

// fleetProvider is the sequence's ClusterProvider: while its Run runs, the
// fleet steps engage and disengage through it; each Run engages what is
// wanted and disengages what it engaged and is no longer wanted.
type fleetProvider struct{ f *fleetState }

func (p fleetProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	f := p.f
	f.mu.Lock()
	f.engage, f.disengage, f.runCtx = engage, disengage, ctx
	fail := f.fail
	for name, gen := range f.want {
		if err := engage(name, f.config(name, gen)); err != nil && ctx.Err() == nil { // refused once Run's ctx has ended
			f.r.violate(Violation{Invariant: DoneWrong, Child: fleetName + "/" + name, Detail: "engage refused a valid member: " + err.Error()})
		}
		f.setEngaged(name, true)
	}
	for name := range f.engaged {
		if _, ok := f.want[name]; !ok {
			disengage(name)
			f.setEngaged(name, false)
		}
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.engage, f.disengage, f.runCtx = nil, nil, nil
		f.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return nil
	case <-fail:
		f.mu.Lock()
		f.fail = make(chan struct{})
		f.mu.Unlock()
		return errors.New("statespace: the provider fails")
	}
}

// apply takes a fleet step; it reports whether st was one.
func (f *fleetState) apply(st Step) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := st.Child
	switch st.Do {
	case DoEngage, DoRotate:
		gen := f.want[name]
		if gen == 0 || st.Do == DoRotate {
			gen = max(gen, len(f.builds[name])) + 1
		}
		f.want[name] = gen
		if f.engage != nil {
			err := f.engage(name, f.config(name, gen))
			switch {
			case err != nil && f.runCtx.Err() != nil:
				// Refused: the Run has been asked to return. The next Run
				// engages what is wanted.
			case err != nil:
				f.r.violate(Violation{Invariant: DoneWrong, Child: fleetName + "/" + name, Detail: "engage refused a valid member: " + err.Error()})
			default:
				f.setEngaged(name, true)
			}
		}
	case DoDisengage:
		delete(f.want, name)
		if f.disengage != nil && f.engaged[name] {
			f.disengage(name)
			if f.runCtx.Err() == nil { // else perhaps ignored: the next Run disengages it
				f.setEngaged(name, false)
			}
		}
	case DoClusterDown:
		if now := time.Now(); f.servers[name].setDown(now) {
			f.downSince[name] = now
		}
	case DoClusterUp:
		f.servers[name].setUp()
		delete(f.downSince, name)
	case DoFailProvider:
		select {
		case <-f.fail:
		default:
			close(f.fail)
		}
	default:
		return false
	}
	return true
}

// heal brings every member's API server back.
func (f *fleetState) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, s := range f.servers {
		s.setUp()
		delete(f.downSince, name)
	}
}

// setUp makes the server answer its probes again.
func (m *memberServer) setUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.downAt.Store(0)
	if m.down.Swap(false) && len(m.outages) > 0 {
		m.outages[len(m.outages)-1].to = time.Now()
	}
	if m.up != nil {
		close(m.up)
		m.up = nil
	}
}

// setEngaged records whether the provider has member engaged. f.mu is
// held.
func (f *fleetState) setEngaged(member string, engaged bool) {
	if engaged {
		f.engaged[member] = true
	} else {
		delete(f.engaged, member)
	}
	if s := f.servers[member]; s != nil {
		s.engaged.Store(engaged)
	}
}

// close stops the members' API servers.
func (f *fleetState) close() {
	for _, s := range f.servers {
		s.srv.CloseClientConnections()
		s.srv.Close()
	}
}

// rebuilt reports whether member's group was built more than once: its
// Status and metrics then count from its last build, its journal from
// the first.
func (f *fleetState) rebuilt(member string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.builds[member]) > 1
}

// builtBetween reports whether the fleet built member's subtree anew (a
// rotation, an engage after a disengage, its group removed by hand)
// after from and before to: what a StopChild stopped is not what then
// runs.
func (f *fleetState) builtBetween(member string, from, to time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.builds[member], func(b build) bool { return b.at.After(from) && b.at.Before(to) })
}

// runnerStarted reports whether the fleet's runner (its child
// FleetProviderChild) was started again after from and before to: a
// restart of it (its own failure, a sibling's under its level's strategy,
// a RestartChild above it) starts a loop for every member, which reads the
// tree afresh and starts a group it finds stopped while the member is
// Online ("a StopChild of the group lasts until the loop next moves it").
// ChildRestarted is published as the runner's start is sent, before any
// loop of it runs. r.mu is held.
func (r *runner) runnerStarted(from, to time.Time) bool {
	return slices.ContainsFunc(r.events, func(e cm.Event) bool {
		return e.Type == cm.ChildRestarted && e.Child == fleetName+"/"+cm.FleetProviderChild && e.Time.After(from) && e.Time.Before(to)
	})
}

// backOnline reports whether member came back Online from Offline (the
// fleet's StartChild of its group), or first Online on a new config (the
// fleet's add of its subtree, in flight when a stop came), after from, in
// time to explain what
// started at to: the fleet says ClusterOnline once its StartChild has
// been answered, after the start it explains, so up to the slack after
// to. (A start of the group the fleet gave up before saying Online, or
// one judged before its ClusterOnline has come, is cameBack's.) r.mu is
// held.
func (r *runner) backOnline(member string, from, to time.Time) bool {
	offline := false
	for _, e := range r.events {
		if e.Child != fleetName+"/"+member || e.Time.After(to.Add(r.cfg.Slack)) {
			continue
		}
		switch e.Type {
		case cm.ClusterOffline:
			offline = true
		case cm.ClusterEngaged:
			// A new config: its subtree is not Online until the fleet's
			// add (or StartChild) of it has been answered, which a stop
			// sent meanwhile does not outlast (the loop finds its group
			// stopped and starts it: "a StopChild of the group lasts
			// until the loop next moves it").
			if e.Err == nil {
				offline = true
			}
		case cm.ClusterOnline:
			if offline && e.Time.After(from) {
				return true
			}
			offline = false
		}
	}
	return false
}

// cameBack reports whether the fleet's last word on member before to
// was a ClusterOffline of its probes (said while the API server was
// down, or naming a probe that failed: under load a probe may time out
// against a server that is up), and the server has answered since: what
// makes the fleet start the member's group again (its StartChild once
// the server has answered for SuccessThreshold), whether or not it then
// says ClusterOnline (the start given up as the member went down again,
// or its ClusterOnline not come yet: it comes once the start, a store's
// Recover first, has been answered). The server must have answered at
// some moment after from too; with ended, that Offline, or the outage
// it was said in, must have ended after from (a return explains one
// restart: the one after it). An Offline of a member Failed (its group
// stopped on its own, a config or build that failed) is not the probes':
// nothing starts its group but a request. r.mu is held.
func (r *runner) cameBack(member string, from, to time.Time, ended bool) bool {
	srv := r.fleet.servers[member]
	if srv == nil {
		return false
	}
	var last *cm.Event
	for i, e := range r.events {
		if e.Child != fleetName+"/"+member || e.Time.After(to) {
			continue
		}
		switch e.Type {
		case cm.ClusterOffline, cm.ClusterOnline, cm.ClusterDisengaged:
			last = &r.events[i]
		case cm.ClusterEngaged:
			if e.Err == nil {
				last = &r.events[i]
			}
		}
	}
	if last == nil || last.Type != cm.ClusterOffline {
		return false
	}
	o, down := srv.outageAt(last.Time)
	switch {
	case down && (o.to.IsZero() || o.to.After(to)):
		return false // down still
	case !down && (last.Err == nil || !strings.Contains(last.Err.Error(), "/readyz")):
		return false // not the probes' Offline
	}
	since := last.Time
	if from.After(since) {
		since = from
	}
	if srv.downThroughout(since, to) {
		return false
	}
	return !ended || last.Time.After(from) || (down && o.to.After(from))
}

// checkFleet checks the fleet's promises after a step. r.mu is not held.
func (r *runner) checkFleet() {
	f := r.fleet
	if f == nil {
		return
	}
	r.mu.Lock()
	events := slices.Clone(r.events)
	reqs := slices.Clone(r.reqs)
	memberPaths := map[string][]string{}
	for member := range f.servers {
		for _, p := range []string{fleetPath(member), fleetStorePath(member)} {
			if r.children[p] != nil {
				memberPaths[member] = append(memberPaths[member], p)
			}
		}
	}
	r.mu.Unlock()
	f.mu.Lock()
	down := make(map[string]time.Time, len(f.downSince))
	for k, v := range f.downSince {
		down[k] = v
	}
	f.mu.Unlock()
	r.checkOfflineLate()
	r.checkOnlineWhileDown()
	r.checkOnlineEarly(memberPaths)
	r.checkOutageSaid()
	for member := range f.servers {
		// Its controller, and its store (Scenario.FleetStore): every
		// rule below holds for the group's children alike, as the
		// fleet stops, removes and starts the group whole.
		for _, path := range memberPaths[member] {
			incs := r.journal.Of(path)
			// MemberRunning: the fleet says ClusterOffline or ClusterDisengaged
			// once its StopChild or RemoveChild of the member's group has been
			// answered, so after every Shutdown under it has returned; an
			// incarnation still active then was not stopped. A StartChild or
			// RestartChild of it (or above it) sent within the slack before may
			// have started it again meanwhile.
			for _, e := range events {
				if e.Child != fleetName+"/"+member || (e.Type != cm.ClusterOffline && e.Type != cm.ClusterDisengaged) {
					continue
				}
				for _, in := range incs {
					if !in.From.Before(e.Time) || (!in.Active() && in.End().Before(e.Time)) {
						continue
					}
					restarted := slices.ContainsFunc(reqs, func(q lifecycleReq) bool {
						return (q.do == DoStartChild || q.do == DoRestart) && within(path, q.path) &&
							q.at.Before(e.Time) && q.at.After(e.Time.Add(-r.cfg.Slack))
					})
					if restarted {
						continue
					}
					r.violateOnce(fmt.Sprintf("memberrunning/%s/%d/%d", path, in.Inc, e.Time.UnixNano()), Violation{Invariant: MemberRunning, Child: path, Time: e.Time,
						Detail: fmt.Sprintf("incarnation %d (started %s) had not ended when the fleet said %s of %s at %s", in.Inc, stamp(in.From), e.Type, member, stamp(e.Time))}, false)
				}
			}
			// DisengagedRan: nothing of a member starts once the fleet has
			// published its ClusterDisengaged, until it is engaged again.
			var gone time.Time
			for _, e := range events {
				if e.Child != fleetName+"/"+member {
					continue
				}
				switch e.Type {
				case cm.ClusterDisengaged:
					gone = e.Time
				case cm.ClusterEngaged:
					if e.Err == nil {
						gone = time.Time{}
					}
				}
			}
			if !gone.IsZero() {
				f.count(&f.disengagedJudged, "disengaged/"+member+"/"+gone.String())
				for _, in := range incs {
					if in.From.After(gone) {
						r.violateOnce(fmt.Sprintf("disengagedran/%s/%d", path, in.Inc), Violation{Invariant: DisengagedRan, Child: path, Time: in.From,
							Detail: fmt.Sprintf("incarnation %d started at %s, after the fleet published ClusterDisengaged of %s at %s and before it was engaged again", in.Inc, stamp(in.From), member, stamp(gone))}, false)
					}
				}
			}
			// OfflineRan: while a member's API server is down, once the fleet
			// has said Offline, nothing of it starts but what a lifecycle
			// request of it (or above it) sent before then starts, which the
			// fleet stops again: one sent after is refused by the group's
			// admission (TreeStarting; docs/fleet.md).
			since, isDown := down[member]
			if !isDown {
				continue
			}
			var offline time.Time
			for _, e := range events {
				if e.Child == fleetName+"/"+member && e.Type == cm.ClusterOffline && e.Time.After(since) {
					offline = e.Time
					break
				}
			}
			if offline.IsZero() {
				continue
			}
			f.count(&f.offlineJudged, "offline/"+member+"/"+offline.String())
			for _, in := range incs {
				if !in.From.After(offline) {
					continue
				}
				asked := slices.ContainsFunc(reqs, func(q lifecycleReq) bool {
					return (q.do == DoStartChild || q.do == DoRestart) && within(path, q.path) && q.at.Before(in.From) && q.at.Before(offline)
				})
				if asked {
					continue
				}
				r.violateOnce(fmt.Sprintf("offlineran/%s/%d", path, in.Inc), Violation{Invariant: OfflineRan, Child: path, Time: in.From,
					Detail: fmt.Sprintf("incarnation %d started at %s while %s's API server was down (since %s) and the fleet had said ClusterOffline at %s, with no StartChild or RestartChild of it or above it sent before that", in.Inc, stamp(in.From), member, stamp(since), stamp(offline))}, false)
			}
		}
	}
}

// offlineBound is how long a member's API server may be down while
// everything the fleet needs to say so holds (offlineWindow) before the
// fleet must have said ClusterOffline: FailureThreshold and one probe
// period (docs/fleet.md, Offline: "within FailureThreshold plus one probe
// period of the failure"), the probe that was out when it went down (its
// ProbeTimeout), the StopChild of its group (ShutdownTimeout bounds the
// Shutdowns it waits for), the longest backoff (a restart of the runner
// that found it), plus Slack.
func (r *runner) offlineBound() time.Duration {
	return FleetFailureThreshold + FleetProbePeriod + FleetProbePeriod + ShutdownTimeout + r.sc.maxBackoff() + r.cfg.Slack
}

// offlineWindow reports since when member's API server has been down
// with everything the fleet needs to find it so and say it: the member
// engaged by the provider (since its last ClusterEngaged), the manager
// Running (since it last entered Running), the member's shard held by
// this replica (with election: the lease since its LeaderElected, or its
// cluster's shard since its ShardAcquired), and the fleet's runner
// running (since its last start, restart or stop, the fleet's group's
// too), each continuously; ok is false when one does not hold now, or
// when events were dropped (then nothing can be told). r.mu is held.
func (r *runner) offlineWindow(member string) (from time.Time, ok bool) {
	srv := r.fleet.servers[member]
	if srv == nil || !srv.engaged.Load() || r.phase != cm.PhaseRunning {
		return time.Time{}, false
	}
	at := srv.downAt.Load()
	if at == 0 {
		return time.Time{}, false
	}
	from, ok, _ = r.fleetCouldAct(member, time.Unix(0, at), time.Time{}, true)
	return from, ok
}

// fleetCouldAct reads the events up to until (every one, when until is
// zero) for since when, no earlier than from, the fleet could act on
// member continuously: the member engaged (since its last ClusterEngaged,
// with engage; without, an engage is not waited for: the first probe of
// a new config decides at once, on the server as it is), the manager's
// last entry into Running, the member's shard held by this
// replica (with election: the lease since its LeaderElected, or its
// cluster's shard since its ShardAcquired), and the fleet's runner
// running (since its last start, restart or stop, the fleet's group's
// too). ok says whether the shard and the runner held at the end, and
// no events were dropped (then nothing can be told); running whether
// the manager's last phase by the events was Running. r.mu is held.
func (r *runner) fleetCouldAct(member string, from, until time.Time, engage bool) (since time.Time, ok, running bool) {
	held, runner := r.sc.Election == ElectionOff, false
	shard := r.sc.shardOf(fleetPath(member))
	since = from
	after := func(t time.Time) {
		if t.After(since) {
			since = t
		}
	}
	for _, e := range r.events {
		if !until.IsZero() && e.Time.After(until) {
			continue // delivered in order, stamped out of it (eventSince)
		}
		switch {
		case e.Type == cm.EventsDropped:
			return time.Time{}, false, false
		case e.Type == cm.PhaseChanged:
			running = e.Phase == cm.PhaseRunning
			if running {
				after(e.Time)
			}
		case e.Type == cm.ClusterEngaged:
			if engage && e.Child == fleetName+"/"+member && e.Err == nil {
				after(e.Time)
			}
		case r.sc.Election == ElectionOff:
		case r.sc.Shards <= 1 && e.Type == cm.LeaderElected:
			held = true
			after(e.Time)
		case r.sc.Shards <= 1 && e.Type == cm.LeaderLost:
			held = false
		case r.sc.Shards > 1 && e.Shard == shard && e.Type == cm.ShardAcquired:
			held = true
			after(e.Time)
		case r.sc.Shards > 1 && e.Shard == shard && (e.Type == cm.ShardLost || e.Type == cm.ShardReleased):
			held = false
		}
		if e.Child == fleetName || e.Child == fleetName+"/provider" {
			switch e.Type {
			case cm.ChildStarted, cm.ChildRestarted:
				runner = true
				after(e.Time)
			case cm.ChildFailed, cm.ChildStopped, cm.ChildRemoved:
				runner = false
				after(e.Time)
			}
		}
	}
	return since, held && runner, running
}

// saidOffline reports whether the fleet's last word on member is
// ClusterOffline or ClusterDisengaged: a ClusterOnline, or a
// ClusterEngaged (a new config, not yet probed), takes it back. r.mu is
// held.
func (r *runner) saidOffline(member string) bool {
	said := false
	for _, e := range r.events {
		if e.Child != fleetName+"/"+member {
			continue
		}
		switch e.Type {
		case cm.ClusterOffline, cm.ClusterDisengaged:
			said = true
		case cm.ClusterOnline:
			said = false
		case cm.ClusterEngaged:
			if e.Err == nil {
				said = false
			}
		}
	}
	return said
}

// checkOfflineLate: a member whose API server has been down for longer
// than offlineBound, engaged, with the manager Running, its shard held
// and the fleet's runner running all along (offlineWindow), has been said
// ClusterOffline (or ClusterDisengaged) by the fleet (OfflineLate). Each
// such window gets an obligation, due offlineBound after its start and
// met once the fleet says so or the window closes; a process paused for
// longer than half the slack excuses it (the pause stalls the probes
// while the bound's clock runs on, and the slack is what a loaded
// machine may cost; half of it, for the smaller pauses the watch does
// not add up). r.mu is not held.
func (r *runner) checkOfflineLate() {
	f := r.fleet
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.doneAt.IsZero() {
		return
	}
	for member := range f.servers {
		from, ok := r.offlineWindow(member)
		if !ok || r.saidOffline(member) {
			continue
		}
		key := fmt.Sprintf("offlinelate/%s/%d", member, from.UnixNano())
		if f.lateSeen[key] {
			continue
		}
		f.lateSeen[key] = true
		f.lateJudged++
		bound := r.offlineBound()
		r.obligations = append(r.obligations, &obligation{
			inv: OfflineLate, child: fleetName + "/" + member, key: key, due: from.Add(bound), pauseExcuses: r.cfg.Slack / 2,
			what: fmt.Sprintf("%s's API server down, the member engaged, the manager Running, its shard held and the fleet's runner running, all since %s (the API server down since %s), and the fleet had said neither ClusterOffline nor ClusterDisengaged of it within %s (FailureThreshold %s, probe period %s, ProbeTimeout %s, ShutdownTimeout %s, backoff %s, slack %s)",
				member, stamp(from), stamp(time.Unix(0, f.servers[member].downAt.Load())), bound, FleetFailureThreshold, FleetProbePeriod, FleetProbePeriod, ShutdownTimeout, r.sc.maxBackoff(), r.cfg.Slack),
			resolved: func() bool {
				if !r.doneAt.IsZero() || r.saidOffline(member) {
					return true
				}
				again, ok := r.offlineWindow(member)
				return !ok || !again.Equal(from)
			},
			more: func() string { return r.memberStory(member) },
		})
	}
}

// onlineBound is how long a member's API server may have been down,
// while the fleet could act on it all along (fleetCouldAct), when the
// fleet says it ClusterOnline: the verdict it says is at most as old as
// the probes allow. The first probe to fail is sent up to a period after
// the failure; the verdict turns once the failing probes span
// FailureThreshold (within half a period), at the first tick after, up to
// a period later; that probe's answer takes up to its ProbeTimeout; plus
// Slack. No StopChild or backoff is in it: saying Online waits for no
// Shutdown, and a runner started again is a window of its own.
func (r *runner) onlineBound() time.Duration {
	return FleetFailureThreshold + 2*FleetProbePeriod + FleetProbePeriod + r.cfg.Slack
}

// checkOnlineWhileDown: every ClusterOnline the fleet said while the
// member's API server was down is judged once (OnlineWhileDown): down
// for longer than onlineBound before it, with the manager Running, its
// shard held and the fleet's runner running all along (fleetCouldAct up
// to the event), it says Online on a verdict no probe could give. An
// engage (a rotation) meanwhile is no excuse: the new config's first
// probe decides at once, and fails against a server that is down. A
// runner started again is: the member's verdict outlives the runner's
// stop, and its probes resume with it. A process paused for longer than half the slack
// excuses it, as it does offline-late. The member's status is not read
// apart: it turns Online only with its ClusterOnline (announce), at the
// same moment; a status that stays Online through an outage is
// offline-late's. r.mu is not held.
func (r *runner) checkOnlineWhileDown() {
	f := r.fleet
	r.mu.Lock()
	defer r.mu.Unlock()
	bound := r.onlineBound()
	for _, e := range r.events {
		member, _ := strings.CutPrefix(e.Child, fleetName+"/")
		srv := f.servers[member]
		if e.Type != cm.ClusterOnline || srv == nil {
			continue
		}
		key := fmt.Sprintf("onlinedown/%s/%d", member, e.Time.UnixNano())
		if f.onlineSeen[key] {
			continue
		}
		f.onlineSeen[key] = true
		down, ok := srv.downAround(e.Time)
		if !ok {
			continue
		}
		f.onlineDownJudged++
		from, ok, running := r.fleetCouldAct(member, down, e.Time, false)
		if !ok || !running || e.Time.Sub(from) <= bound {
			continue
		}
		v := Violation{Invariant: OnlineWhileDown, Child: e.Child, Time: e.Time,
			Detail: fmt.Sprintf("the fleet said ClusterOnline of %s at %s, its API server down since %s, and the manager Running, its shard held and the fleet's runner running all since %s: %s before it, past %s (FailureThreshold %s, two probe periods %s, ProbeTimeout %s, slack %s)",
				member, stamp(e.Time), stamp(down), stamp(from), e.Time.Sub(from).Round(time.Millisecond), bound, FleetFailureThreshold, 2*FleetProbePeriod, FleetProbePeriod, r.cfg.Slack)}
		if r.pauses.Longest() > r.cfg.Slack/2 {
			r.excuseOnce(key, v)
			continue
		}
		r.violateOnce(key, v, false)
	}
}

// checkOnlineEarly: every ClusterOnline the fleet said is judged once
// (OnlineEarly): each of the member's children (paths, by member) must
// then be running, an incarnation started (its start call returned nil)
// and not ended, unless something since the fleet's previous word on the
// member may have left it not running. r.mu is not held.
func (r *runner) checkOnlineEarly(paths map[string][]string) {
	incs := map[string][]Incarnation{}
	for _, ps := range paths {
		for _, p := range ps {
			incs[p] = r.journal.Of(p) // j.mu before r.mu: the journal reports under its lock
		}
	}
	f := r.fleet
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.events, func(e cm.Event) bool { return e.Type == cm.EventsDropped }) {
		return // the fleet's previous word may be among those dropped
	}
	for i, e := range r.events {
		member, _ := strings.CutPrefix(e.Child, fleetName+"/")
		if e.Type != cm.ClusterOnline || f.servers[member] == nil {
			continue
		}
		key := fmt.Sprintf("onlineearly/%s/%d", member, e.Time.UnixNano())
		if f.earlySeen[key] {
			continue
		}
		f.earlySeen[key] = true
		prev := lastWord(r.events[:i], e.Child) // the fleet's previous word on the member
		if _, held, _ := r.fleetCouldAct(member, prev, e.Time, false); !held {
			// Under sharded leadership a replica that does not hold the
			// member's shard says it Online when it answers, its
			// controllers running elsewhere (docs/fleet.md, The runner).
			continue
		}
		f.earlyJudged++
		for _, path := range paths[member] {
			if why := r.notRunningAt(path, incs[path], prev, e.Time); why != "" {
				v := Violation{Invariant: OnlineEarly, Child: path, Time: e.Time,
					Detail: fmt.Sprintf("the fleet said ClusterOnline of %s at %s while %s %s, with no lifecycle call of it or above it, failure or change of leadership since the fleet's previous word on it at %s", member, stamp(e.Time), path, why, stamp(prev))}
				if r.pauses.Longest() > r.cfg.Slack/2 {
					r.excuseOnce(key+"/"+path, v)
					continue
				}
				r.violateOnce(key+"/"+path, v, false)
			}
		}
	}
}

// checkOutageSaid: every stop of a member's group followed by a start of
// it is judged (OutageUnsaid): the fleet's stops of a group are its
// Offline verdicts, said before it starts the group again. r.mu is not
// held.
func (r *runner) checkOutageSaid() {
	f := r.fleet
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.events, func(e cm.Event) bool { return e.Type == cm.EventsDropped }) {
		return
	}
	for i, e := range r.events {
		member, _ := strings.CutPrefix(e.Child, fleetName+"/")
		if e.Type != cm.ChildStopped || f.servers[member] == nil {
			continue
		}
		group := e.Child
		prev := lastWord(r.events[:i], group) // the fleet's previous word on the member
		said, started := false, time.Time{}
		for _, n := range r.events[i+1:] {
			switch {
			case n.Child == group && strings.HasPrefix(string(n.Type), "Cluster"),
				n.Child == group && (n.Type == cm.ChildRemoved || n.Type == cm.ChildFailed),
				n.Type == cm.PhaseChanged, n.Type == cm.LeaderElected, n.Type == cm.LeaderLost,
				n.Type == cm.ShardAcquired, n.Type == cm.ShardLost, n.Type == cm.ShardReleased:
				said = true
			case within(n.Child, group) && (n.Type == cm.ChildStarted || n.Type == cm.ChildRestarted):
				started = n.Time
			}
			if !started.IsZero() {
				break
			}
		}
		if started.IsZero() {
			continue
		}
		key := fmt.Sprintf("outageunsaid/%s/%d", member, e.Time.UnixNano())
		if !f.outageSeen[key] {
			f.outageSeen[key] = true
			f.outageJudged++
		}
		up := ancestry(group)
		if said || r.groupAskedAround(group, prev, started) || slices.ContainsFunc(r.events, func(p cm.Event) bool {
			// A failure of it, or a restart of a group above it (its
			// strategy: a sibling's failure), since the previous word.
			return !p.Time.Before(prev) && !p.Time.After(started) &&
				((p.Child == group && p.Type == cm.ChildFailed) || (p.Type == cm.ChildRestarted && p.Child != group && slices.Contains(up, p.Child)))
		}) {
			continue
		}
		r.violateOnce(key, Violation{Invariant: OutageUnsaid, Child: group, Time: e.Time,
			Detail: fmt.Sprintf("its group stopped at %s and started again at %s with no ClusterOffline between, no lifecycle call of it or above it since the fleet's previous word on it at %s, no removal, failure, engage, change of leadership or of phase", stamp(e.Time), stamp(started), stamp(prev))}, false)
	}
}

// lastWord is when the fleet last said something (a Cluster* event) of
// the member whose subtree is child, in events; zero if never.
func lastWord(events []cm.Event, child string) time.Time {
	var at time.Time
	for _, e := range events {
		if e.Child == child && strings.HasPrefix(string(e.Type), "Cluster") && e.Time.After(at) {
			at = e.Time
		}
	}
	return at
}

// groupAskedAround reports whether a lifecycle call of group (a member's
// group or a child in it) or above it was sent before until and after
// since, or not answered by then. r.mu is held.
func (r *runner) groupAskedAround(group string, since, until time.Time) bool {
	up := ancestry(group)
	return slices.ContainsFunc(r.reqs, func(q lifecycleReq) bool {
		return q.at.Before(until) && slices.Contains(up, q.path) && (q.at.After(since) || q.answered.IsZero() || q.answered.After(since))
	})
}

// notRunningAt says how path (its incarnations incs) was not running at
// at, when nothing since prev excuses it; "" when it ran or is excused.
// r.mu is held.
func (r *runner) notRunningAt(path string, incs []Incarnation, prev, at time.Time) string {
	why := "had never started"
	for _, in := range incs {
		switch {
		case !in.From.Before(at):
			continue
		case in.From.After(prev) && !in.StartOpen && !in.StartedOK:
			return "" // its start failed: supervised from then on
		case in.StartOpen || in.StartEnd.After(at):
			why = fmt.Sprintf("was still in its start call (incarnation %d, entered %s)", in.Inc, stamp(in.From))
		case !in.StartedOK:
			why = fmt.Sprintf("had failed its start (incarnation %d, at %s)", in.Inc, stamp(in.StartEnd))
		case in.ShutdownOut && !in.ShutdownEnd.After(at):
			why = fmt.Sprintf("had been shut down (incarnation %d, at %s)", in.Inc, stamp(in.ShutdownEnd))
		default:
			why = ""
		}
	}
	if why == "" {
		return ""
	}
	if r.groupAskedAround(path, prev, at) {
		return ""
	}
	up := ancestry(path)
	for _, e := range r.events {
		if e.Time.Before(prev) || e.Time.After(at) {
			continue
		}
		switch e.Type {
		case cm.LeaderElected, cm.LeaderLost, cm.ShardAcquired, cm.ShardLost, cm.ShardReleased:
			return ""
		case cm.ChildFailed:
			if slices.Contains(up, e.Child) {
				return ""
			}
		}
	}
	return why
}

// memberStory is what the fleet said of member and what its children
// did last, for a report. r.mu is not held.
func (r *runner) memberStory(member string) string {
	r.mu.Lock()
	var said []string
	for _, e := range r.events {
		if e.Child == fleetName+"/"+member && strings.HasPrefix(string(e.Type), "Cluster") {
			said = append(said, fmt.Sprintf("%s at %s", e.Type, stamp(e.Time)))
		}
	}
	var paths []string
	for p := range r.children {
		if fleetMember(p) == member {
			paths = append(paths, p)
		}
	}
	r.mu.Unlock()
	slices.Sort(paths)
	out := fmt.Sprintf("the fleet said of %s: %v", member, said)
	for _, p := range paths {
		out += fmt.Sprintf("; %s's last calls: %v", p, r.journal.Tail(p, 6))
	}
	return out
}

// count adds one to n the first time key is seen.
func (f *fleetState) count(n *int, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.judged[key] {
		f.judged[key] = true
		*n++
	}
}

// checkFleetEnd checks, once the manager has stopped, that every Cluster
// the fleet built has ended (its Context) and refuses writes.
func (r *runner) checkFleetEnd() {
	f := r.fleet
	if f == nil {
		return
	}
	f.mu.Lock()
	var all []build
	for _, bs := range f.builds {
		all = append(all, bs...)
	}
	f.mu.Unlock()
	for _, b := range all {
		c, member := b.cluster, b.cluster.Name()
		select {
		case <-c.Context().Done():
		case <-time.After(r.cfg.Slack):
			r.violate(Violation{Invariant: ClusterNotEnded, Child: fleetName + "/" + member,
				Detail: fmt.Sprintf("the Cluster built at %s (config generation %d) had not ended %s after the manager stopped", stamp(b.at), b.gen, r.cfg.Slack)})
			continue
		}
		f.count(&f.endedJudged, fmt.Sprintf("ended/%p", c))
		before := f.servers[member].writes.Load()
		err := writeThrough(c)
		if err == nil || !errors.Is(err, cm.ErrClusterDisengaged) || f.servers[member].writes.Load() != before {
			r.violate(Violation{Invariant: ClusterWritePassed, Child: fleetName + "/" + member,
				Detail: fmt.Sprintf("a write through the Config of the Cluster built at %s (generation %d), ended, answered %v (want ErrClusterDisengaged, and nothing reaching the API server)", stamp(b.at), b.gen, err)})
		}
	}
}

// writeThrough sends one write through c's Config.
func writeThrough(c cm.Cluster) error {
	client, err := rest.HTTPClientFor(c.Config())
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Config().Host+"/api/v1/namespaces/default/configmaps", strings.NewReader("{}"))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
