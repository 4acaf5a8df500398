package statespace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	cm "github.com/actorkube/controllermanager"
)

// Action is what a Step does.
type Action string

// The actions of a sequence.
const (
	// DoStart calls Start in the background (it blocks until elected).
	DoStart Action = "Start"
	// DoCancelStart cancels the context Start was given: the caller asks to
	// stop.
	DoCancelStart Action = "CancelStart"
	// DoShutdown calls ShutdownAndWait in the background, with a deadline of
	// Dur (0: 10s).
	DoShutdown Action = "ShutdownAndWait"
	// Lifecycle messages, sent with Request in the background; each names
	// Child. DoAdd adds a new child of Kind with Knobs.
	DoRestart    Action = "RestartChild"
	DoStop       Action = "StopChild"
	DoStartChild Action = "StartChild"
	DoRemove     Action = "RemoveChild"
	DoAdd        Action = "AddChild"
	// Lease events: cut this replica off from the API server, reconnect it,
	// have a thief take the lease for Dur (0: 1s), make every lease call
	// take Dur (0: fast again).
	DoPartition Action = "Partition"
	DoReconnect Action = "Reconnect"
	DoSteal     Action = "Steal"
	DoSlowAPI   Action = "SlowAPI"
	// Edits of Step.Shard's Lease by another writer, as kubectl or a
	// GitOps tool makes them: an annotation, the group label dropped
	// (sharded: the label every replica's watch selects by), the Lease
	// deleted. None of them is a fault: the holder keeps its lease
	// (RenewableLost holds), re-creating a deleted Lease in its term.
	// WithLeaseEdits adds them.
	DoAnnotateLease Action = "AnnotateLease"
	DoUnlabelLease  Action = "UnlabelLease"
	DoDeleteLease   Action = "DeleteLease"
	// The replica's Lease watches stop delivering without closing (a
	// stuck watch cache, a proxy that holds the stream), and deliver again;
	// the events in between are lost. Not a fault either: the lease must
	// hold, and be campaigned for, on reads alone. WithStalledWatches adds
	// them.
	DoStallWatch  Action = "StallWatch"
	DoResumeWatch Action = "ResumeWatch"
	// The replica's Lease lists go unanswered (each waits until the lists
	// are answered again or its caller gives it up), and are answered
	// again: a list made when the watch closes, or when a stalled one is
	// polled, meets it. No fault either. WithStalledWatches adds them.
	DoHangList   Action = "HangList"
	DoAnswerList Action = "AnswerList"
	// DoFail reports a failure of Child's current incarnation through its
	// FailureReporter.
	DoFail Action = "Fail"
	// DoKnobs sets Child's behaviour to Knobs.
	DoKnobs Action = "Knobs"
	// DoWait lets Dur pass.
	DoWait Action = "Wait"
)

// Step is one step of a sequence.
type Step struct {
	// At, when set, is the phase the step waits for first (up to a few
	// seconds); the step is skipped when the phase does not come.
	At    cm.Phase
	Do    Action
	Child string // a child's (or, for a lifecycle step, a group's) path
	Kind  string // DoAdd's: "controller", "store" or "webhook"
	Knobs Knobs  // DoKnobs', DoAdd's
	Dur   time.Duration
	Shard int // DoSteal's, with shards: whose Lease is stolen
	// Parent is DoAdd's: the path of the group the child goes into (empty:
	// the root).
	Parent string
}

func (s Step) String() string {
	var b strings.Builder
	if s.At != "" {
		fmt.Fprintf(&b, "at %s: ", s.At)
	}
	b.WriteString(string(s.Do))
	if s.Kind != "" {
		b.WriteString(" " + s.Kind)
	}
	if s.Child != "" {
		b.WriteString(" " + s.Child)
	}
	if s.Do == DoAdd && s.Parent != "" {
		b.WriteString(" into " + s.Parent)
	}
	if s.Do == DoKnobs || s.Do == DoAdd {
		b.WriteString(" " + s.Knobs.String())
	}
	if (s.Do == DoSteal || s.Do == DoAnnotateLease || s.Do == DoUnlabelLease || s.Do == DoDeleteLease) && s.Shard > 0 {
		fmt.Fprintf(&b, " shard %d", s.Shard)
	}
	if s.Dur != 0 {
		b.WriteString(" " + s.Dur.String())
	}
	return b.String()
}

// String lists the knobs that are set.
func (k Knobs) String() string {
	var parts []string
	if k.StartDelay > 0 {
		p := "start " + k.StartDelay.String()
		if k.StartIgnoresCtx {
			p += " ignoring ctx"
		}
		parts = append(parts, p)
	}
	if k.StartFails {
		parts = append(parts, "start fails")
	}
	if k.StartPanics {
		parts = append(parts, "start panics")
	}
	if k.ShutdownDelay > 0 {
		p := "shutdown " + k.ShutdownDelay.String()
		if k.ShutdownIgnoresCtx {
			p += " ignoring ctx"
		}
		parts = append(parts, p)
	}
	if k.ShutdownHangs {
		parts = append(parts, "shutdown hangs")
	}
	if k.Unhealthy {
		parts = append(parts, "unhealthy")
	}
	if k.HealthPanics {
		parts = append(parts, "health panics")
	}
	if len(parts) == 0 {
		return "{calm}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Election modes of a Scenario.
const (
	ElectionOff = ""
	Exit        = string(cm.LeaseLostExit)
	Reelect     = string(cm.LeaseLostReelect)
)

// Scenario is one sequence: a manager's make-up and the steps to drive it
// through. Its children are named store-0.., ctrl-0.., hook-0.. in that
// order of adding (stores, controllers, webhooks); children added by DoAdd
// are named added-1... A tree scenario (Groups) puts some of them in
// groups: each is then known (in steps, events, Status) by its path,
// "g1/g2/ctrl-0", and the root's groups are added after its controllers,
// before its webhooks.
type Scenario struct {
	Name                          string
	Seed                          uint64 // the seed it was generated from; 0 when hand-written
	Strategy                      cm.SupervisionStrategy
	Election                      string // ElectionOff, Exit or Reelect
	Stores, Controllers, Webhooks int
	// PreflightDelay is how long Context.Start takes (the Initializing
	// phase).
	PreflightDelay time.Duration
	// StartTimeout is Start's.
	StartTimeout time.Duration
	// Backoff, when positive, is both InitialBackoff and MaxBackoff, so that
	// a child stays BackingOff long enough for a step to strike then.
	Backoff time.Duration
	// Shards, above 1, runs the manager with sharded leadership: that many
	// shard Leases, each controller pinned to cm.ShardOf(its name, Shards);
	// a Steal takes Step.Shard's Lease.
	Shards int
	// WriteLatency, when positive, is how long every Lease create and
	// update takes from the start (with up to a tenth more of jitter),
	// below RetryPeriod: an API server under load, whose calls
	// overlap (leasetest's SetLatency). Nothing held may be lost for it.
	WriteLatency time.Duration
	// Groups, when set, make the scenario a supervision tree: each is a
	// controllermanager.NewGroup, parents before their children.
	Groups []Group
	// Fleet, when positive, adds a Fleet "fleet" with that many member
	// clusters (WithFleet), after the other children.
	Fleet int
	// FleetStore, when positive, gives each member's group a store,
	// "fleet/c<i>/fstore", whose Recover lists for that long and then
	// waits until the member's API server answers (or its context ends),
	// as an informer's cache sync does (WithFleet).
	FleetStore time.Duration
	Steps      []Step
}

// initialBackoff is the scenario's InitialBackoff.
func (s Scenario) initialBackoff() time.Duration {
	if s.Backoff > 0 {
		return s.Backoff
	}
	return InitialBackoff
}

// maxBackoff is the scenario's MaxBackoff.
func (s Scenario) maxBackoff() time.Duration {
	if s.Backoff > 0 {
		return s.Backoff
	}
	return MaxBackoff
}

func (s Scenario) String() string {
	var b strings.Builder
	election := s.Election
	if election == "" {
		election = "off"
	}
	fmt.Fprintf(&b, "%s, election %s, %d stores, %d controllers, %d webhooks", s.Strategy, election, s.Stores, s.Controllers, s.Webhooks)
	if s.Shards > 1 {
		fmt.Fprintf(&b, ", %d shards", s.Shards)
	}
	if s.PreflightDelay > 0 {
		fmt.Fprintf(&b, ", preflight %s", s.PreflightDelay)
	}
	if s.StartTimeout > 0 {
		fmt.Fprintf(&b, ", startTimeout %s", s.StartTimeout)
	}
	if s.Backoff > 0 {
		fmt.Fprintf(&b, ", backoff %s", s.Backoff)
	}
	if s.WriteLatency > 0 {
		fmt.Fprintf(&b, ", Lease writes %s", s.WriteLatency)
	}
	for _, g := range s.Groups {
		fmt.Fprintf(&b, "\n  group %s", g)
	}
	if s.Fleet > 0 {
		fmt.Fprintf(&b, "\n  fleet %q of %d members, each one controller %q", fleetName, s.Fleet, fleetCtrl)
		if s.FleetStore > 0 {
			fmt.Fprintf(&b, " and a store %q whose Recover lists for %s, then waits for its API server", fleetStore, s.FleetStore)
		}
	}
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "\n  %2d. %s", i+1, st)
	}
	return b.String()
}

// names lists the scenario's initial children, in the order added.
func (s Scenario) names() (stores, ctrls, hooks []string) {
	for i := range s.Stores {
		stores = append(stores, fmt.Sprintf("store-%d", i))
	}
	for i := range s.Controllers {
		ctrls = append(ctrls, fmt.Sprintf("ctrl-%d", i))
	}
	for i := range s.Webhooks {
		hooks = append(hooks, fmt.Sprintf("hook-%d", i))
	}
	return
}

// Generate returns the random scenario of seed: the same seed, the same
// scenario (the timing of a run differs).
func Generate(seed uint64) Scenario { return generate(seed, true) }

// WithLeaseEdits returns s with one to three edits of its Leases by another
// writer (DoAnnotateLease, DoUnlabelLease, DoDeleteLease) at random places
// after its Start, each followed by a wait long enough for a renewal to
// meet it. They are drawn from a stream of their own, seeded by
// s.Seed, so that the other steps stay Generate's (a seed replayed without
// them is the same sequence); a scenario without an elector is returned as
// it is.
func WithLeaseEdits(s Scenario) Scenario {
	if s.Election == ElectionOff {
		return s
	}
	r := rand.New(rand.NewPCG(s.Seed^0x5bd1e995, s.Seed^0x27d4eb2f165667c5))
	s.Steps = insertAfterStart(s.Steps, r, 1+r.IntN(3), func() []Step {
		st := Step{Do: []Action{DoAnnotateLease, DoUnlabelLease, DoDeleteLease}[r.IntN(3)]}
		if s.Shards > 1 {
			st.Shard = r.IntN(s.Shards)
		}
		return []Step{st, {Do: DoWait, Dur: time.Duration(300+r.IntN(1200)) * time.Millisecond}}
	})
	s.Name += "+edits"
	return s
}

// WithStalledWatches returns s with its replica's Lease reads stalled at a
// random place after its Start, once or twice, for 1 to 3 lease durations
// or to the end: its watches stop delivering (DoStallWatch), its lists go
// unanswered (DoHangList), or both. As WithLeaseEdits, they are drawn from
// a stream of their own, seeded by s.Seed, so that the other steps stay
// Generate's; a scenario without an elector is returned as it is.
func WithStalledWatches(s Scenario) Scenario {
	if s.Election == ElectionOff {
		return s
	}
	r := rand.New(rand.NewPCG(s.Seed^0x85ebca6b, s.Seed^0xc2b2ae3d27d4eb4f))
	s.Steps = insertAfterStart(s.Steps, r, 1+r.IntN(2), func() []Step {
		begin, end := [][]Step{
			{{Do: DoStallWatch}}, {{Do: DoHangList}}, {{Do: DoStallWatch}, {Do: DoHangList}},
		}, [][]Step{
			{{Do: DoResumeWatch}}, {{Do: DoAnswerList}}, {{Do: DoResumeWatch}, {Do: DoAnswerList}},
		}
		k := r.IntN(3)
		run := slices.Clone(begin[k])
		if r.IntN(4) > 0 {
			run = append(run, Step{Do: DoWait, Dur: time.Duration(1+r.IntN(3)) * LeaseDuration})
			run = append(run, end[k]...)
		}
		return run
	})
	s.Name += "+stalls"
	return s
}

// insertAfterStart returns steps with n runs of steps that draw makes
// inserted, each before a step r picks after the Start (or at the end),
// draw called before each pick.
func insertAfterStart(steps []Step, r *rand.Rand, n int, draw func() []Step) []Step {
	first := slices.IndexFunc(steps, func(st Step) bool { return st.Do == DoStart })
	at := map[int][]Step{} // before which of steps (len: at the end)
	for range n {
		run := draw()
		i := first + 1 + r.IntN(len(steps)-first)
		at[i] = append(at[i], run...)
	}
	out := make([]Step, 0, len(steps)+3*n)
	for i := range len(steps) + 1 {
		out = append(out, at[i]...)
		if i < len(steps) {
			out = append(out, steps[i])
		}
	}
	return out
}

// generate is Generate; trees false leaves out the tree, drawn last (a
// test compares the two).
func generate(seed uint64, trees bool) Scenario {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func(n int) int { return r.IntN(n) }
	chance := func(p float64) bool { return r.Float64() < p }
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo))) }

	s := Scenario{Seed: seed, Name: fmt.Sprintf("seed-%d", seed)}
	s.Strategy = []cm.SupervisionStrategy{cm.OneForOne, cm.AllForOne, cm.RestForOne}[pick(3)]
	switch x := r.Float64(); {
	case x < 0.25:
		s.Election = ElectionOff
	case x < 0.55:
		s.Election = Exit
	default:
		s.Election = Reelect
	}
	s.Stores, s.Controllers, s.Webhooks = pick(2), 1+pick(3), pick(3)
	if chance(0.3) {
		s.PreflightDelay = between(10*time.Millisecond, 80*time.Millisecond)
	}
	if chance(0.25) {
		s.StartTimeout = 2 * time.Second
	}
	if chance(0.25) {
		// Long enough for a lease to be lost while a child backs off.
		s.Backoff = between(time.Second, 2*time.Second)
	}
	stores, ctrls, hooks := s.names()
	all := append(append(append([]string(nil), stores...), ctrls...), hooks...)
	added := 0
	lastKnobs := ""
	anyChild := func() string {
		if added > 0 && chance(0.2) {
			return fmt.Sprintf("added-%d", 1+pick(added))
		}
		return all[pick(len(all))]
	}
	knobs := func() Knobs {
		var k Knobs
		switch x := pick(100); {
		case x < 22:
			k.StartDelay = between(20*time.Millisecond, 250*time.Millisecond)
			k.StartIgnoresCtx = chance(0.5)
		case x < 32:
			k.StartFails = true
		case x < 38:
			k.StartPanics = true
		case x < 55:
			k.ShutdownDelay = between(10*time.Millisecond, 200*time.Millisecond)
			k.ShutdownIgnoresCtx = chance(0.4)
		case x < 63:
			k.ShutdownHangs = true
		case x < 78:
			k.Unhealthy = true
		case x < 83:
			k.HealthPanics = true
		default: // calm
		}
		return k
	}

	// Before Start: behaviour that makes the phases last, and a replica
	// that starts cut off.
	for _, name := range all {
		if chance(0.3) {
			k := Knobs{StartDelay: between(20*time.Millisecond, 250*time.Millisecond), StartIgnoresCtx: chance(0.5)}
			if chance(0.3) {
				k.ShutdownDelay = between(10*time.Millisecond, 150*time.Millisecond)
				k.ShutdownIgnoresCtx = chance(0.4)
			}
			s.Steps = append(s.Steps, Step{Do: DoKnobs, Child: name, Knobs: k})
		}
	}
	if s.Election != ElectionOff && chance(0.1) {
		s.Steps = append(s.Steps, Step{Do: DoPartition})
	}
	if chance(0.04) {
		s.Steps = append(s.Steps, Step{Do: DoShutdown})
	}
	s.Steps = append(s.Steps, Step{Do: DoStart})

	phases := []cm.Phase{cm.PhaseInitializing, cm.PhaseElecting, cm.PhaseRecovering, cm.PhaseStarting, cm.PhaseStarting,
		cm.PhaseRunning, cm.PhaseRunning, cm.PhaseRunning, cm.PhaseShuttingDown}
	type weighted struct {
		w  int
		do Action
	}
	actions := []weighted{
		{14, DoFail}, {14, DoKnobs}, {7, DoRestart}, {5, DoStop}, {5, DoStartChild}, {3, DoRemove}, {4, DoAdd},
		{5, DoShutdown}, {1, DoCancelStart}, {10, DoWait},
	}
	if s.Election != ElectionOff {
		actions = append(actions, weighted{5, DoPartition}, weighted{4, DoReconnect}, weighted{4, DoSteal}, weighted{3, DoSlowAPI})
	}
	total := 0
	for _, a := range actions {
		total += a.w
	}
	n := 3 + pick(8)
	for range n {
		st := Step{}
		if chance(0.35) {
			st.At = phases[pick(len(phases))]
		}
		x := pick(total)
		for _, a := range actions {
			if x < a.w {
				st.Do = a.do
				break
			}
			x -= a.w
		}
		switch st.Do {
		case DoFail:
			// Mostly the child whose behaviour just changed: a failure
			// then makes its restart meet that behaviour.
			st.Child = anyChild()
			if lastKnobs != "" && chance(0.5) {
				st.Child = lastKnobs
			}
		case DoRestart, DoStop, DoStartChild, DoRemove:
			st.Child = anyChild()
		case DoKnobs:
			st.Child, st.Knobs = anyChild(), knobs()
			lastKnobs = st.Child
		case DoAdd:
			added++
			st.Kind = []string{"controller", "controller", "webhook", "store"}[pick(4)]
			if chance(0.4) {
				st.Knobs = knobs()
			}
		case DoShutdown:
			if chance(0.3) {
				st.Dur = between(50*time.Millisecond, 500*time.Millisecond)
			}
		case DoWait:
			st.Dur = between(5*time.Millisecond, 200*time.Millisecond)
		case DoSlowAPI:
			if chance(0.7) {
				st.Dur = between(50*time.Millisecond, 400*time.Millisecond)
			}
		}
		s.Steps = append(s.Steps, st)
		if st.Do == DoPartition || st.Do == DoSteal || (st.Do == DoSlowAPI && st.Dur > 0) {
			// A lease is lost a renew deadline after its last renewal: let
			// that happen within the sequence, mostly.
			if chance(0.6) {
				s.Steps = append(s.Steps, Step{Do: DoWait, Dur: between(900*time.Millisecond, 1800*time.Millisecond)})
				if len(hooks) > 0 && chance(0.4) {
					// A webhook that stops being ready, on a replica that may
					// have become a standby.
					s.Steps = append(s.Steps, Step{Do: DoKnobs, Child: hooks[pick(len(hooks))], Knobs: Knobs{Unhealthy: true}})
				}
			}
		} else if chance(0.5) {
			s.Steps = append(s.Steps, Step{Do: DoWait, Dur: between(5*time.Millisecond, 120*time.Millisecond)})
		}
	}
	// Drawn last, so that the rest of a seed's sequence is what it was
	// before sharding was explored.
	// setShards makes the sequence sharded, its Steals drawn over the shards.
	setShards := func(shards int) {
		s.Shards = shards
		for i := range s.Steps {
			if s.Steps[i].Do == DoSteal {
				s.Steps[i].Shard = pick(s.Shards)
			}
		}
	}
	if s.Election != ElectionOff && chance(0.35) {
		setShards(2 + pick(3))
	}
	// Drawn after sharding, for the same reason: slow Lease writes from the
	// start, for a third of the elected sequences, with 16 to 32 shards so
	// that campaigns and renewals meet: at 60 to 90 ms a write, one pass of
	// campaigns made one after another takes 1 to 2.9 s, past the renew
	// deadline, while side by side they take one write's time.
	if s.Election != ElectionOff && chance(0.33) {
		s.WriteLatency = between(60*time.Millisecond, RetryPeriod*9/10)
		setShards(16 + pick(17))
	}
	// Trees, drawn last for the same reason.
	if chance(0.45) && trees {
		s.growTree(r)
		s.growShardedGroups()
		s.growHealth()
	}
	return s
}
