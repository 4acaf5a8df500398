package supervise

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// prober is the supervisor's liveness probing, from the moment webhooks
// have started (a standby's webhooks are probed too) until shutdown: it
// ticks at the shortest HealthInterval of any level, and at each tick the
// levels that are due are swept (onProbeTick), each at its own interval
// and one sweep of it at a time. It owns the timer and the tick's count;
// the sweeps are the root's.
type prober struct {
	clock    Clock
	interval time.Duration // the shortest level's HealthInterval; probing is off when not positive
	tick     func()        // sends probeTick to the supervisor
	timer    clock.Timer
	started  bool
	stopped  bool
	ticks    uint64    // ticks taken: a level notes the one it was judged at (level.probeTick)
	since    time.Time // when probing started: each level's first sweep is an interval of its own later
}

// healthTiming is how a level's hosted children are probed (level.probeTiming).
type healthTiming struct {
	interval, timeout time.Duration
	threshold         int // unhealthy or silent answers in a row that make a failure
}

// shorten makes the tick d when d is shorter than it: a group with a
// shorter HealthInterval than any before is probed at its own. A tick
// armed already is re-armed, unless it has fired (its probeTick is on its
// way, and arms the next with d).
func (p *prober) shorten(d time.Duration) {
	if p.interval <= 0 || d <= 0 || d >= p.interval {
		return
	}
	p.interval = d
	if p.started && !p.stopped && p.timer.Stop() {
		p.timer = p.clock.AfterFunc(d, p.tick)
	}
}

// start arms the first sweep, once.
func (p *prober) start() {
	if p.interval <= 0 || p.started || p.stopped {
		return
	}
	p.started = true
	p.since = p.clock.Now()
	p.timer = p.clock.AfterFunc(p.interval, p.tick)
}

// stop ends probing for good: the manager is shutting down.
func (p *prober) stop() {
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

// due reports, at a probeTick, whether sweeps may begin now: not once
// stopped. The tick's sweeps are judged against the interval it was armed
// with; the root then arms the next (arm).
func (p *prober) due() bool {
	if !p.started || p.stopped {
		return false
	}
	p.ticks++
	return true
}

// arm arms the next tick at d, the shortest interval of the levels that
// have children to probe now (shortestProbe): the tick lengthens again once
// a group with a shorter HealthInterval is gone, as shorten makes it
// shorter when one comes.
func (p *prober) arm(d time.Duration) {
	if d > 0 {
		p.interval = d
	}
	p.timer = p.clock.AfterFunc(p.interval, p.tick)
}

// shortestProbe is the interval the probe ticks at: base (the manager's
// HealthInterval) or the shorter one of a level that holds a controller or
// a webhook, whatever its state (a child that starts again is probed at
// its level's interval from its first tick).
func (r *registry) shortestProbe(base time.Duration) time.Duration {
	d := base
	for _, rec := range r.children {
		if rec.spec.Kind == actors.KindController || rec.spec.Kind == actors.KindWebhook {
			if i := rec.lvl.probeTiming.interval; i > 0 && i < d {
				d = i
			}
		}
	}
	return d
}

// dueAt reports whether lvl's children are to be swept at the tick now:
// its interval has passed since its last sweep began, or since probing
// started before its first (within half a tick,
// so that a timer firing a little early does not skip a period), and that
// sweep has ended. The answer is kept for the tick.
func (lvl *level) dueAt(p *prober, now time.Time) bool {
	if lvl.probeTick != p.ticks {
		lvl.probeTick = p.ticks
		if lvl.nextProbe.IsZero() {
			lvl.nextProbe = p.since.Add(lvl.probeTiming.interval)
		}
		lvl.probeDue = !lvl.probing && !now.Add(p.interval/2).Before(lvl.nextProbe)
		if lvl.probeDue {
			lvl.nextProbe = now.Add(lvl.probeTiming.interval)
		}
	}
	return lvl.probeDue
}

type (
	// probeTick: time for the next liveness sweep.
	probeTick struct{}
	// probeDone: a liveness sweep has every answer, or its deadline passed.
	probeDone struct {
		sweep *childactor.HealthSweep
		recs  []*childRecord
		gens  []uint64
	}
	// probeBatch is the children of the due levels that share a
	// HealthTimeout: one sweep.
	probeBatch struct {
		timeout time.Duration
		recs    []*childRecord
	}
)

// onGatherHealth answers a manager's GetHealth: one entry per controller, in
// the order they were added, then one per group (level.appendHealth); none before
// the manager is starting. Children
// the supervisor knows are not running are reported from their standing;
// the others are asked.
func (s *root) onGatherHealth(m GatherHealth) {
	col := m.Collector
	if !s.obs.Starting() {
		col.Expect([]actors.HealthStatus{}, nil)
		return
	}
	ctrls := s.reg.ofKind(actors.KindController)
	// The groups' own lines come after the controllers', in the same slice:
	// room for them now, rather than a copy of every status to append them.
	statuses := make([]actors.HealthStatus, len(ctrls), len(ctrls)+s.reg.groups())
	pending := make([]int, 0, len(ctrls))
	for i, rec := range ctrls {
		standing, cause, answers := rec.standing()
		if answers {
			statuses[i].Name = rec.spec.Name
			pending = append(pending, i)
			continue
		}
		statuses[i] = standing.Status(rec.spec.Name, cause)
	}
	statuses = s.tree.appendGroupsHealth(statuses) // never pending: recs stay the controllers
	queryHealth(s.ctx, s.self.system.Root, col, ctrls, statuses, pending)
}

// publishNames publishes, once the tree has changed (a child or a group
// added or removed), the names onGatherHealth lists now, in its order: a
// GetHealth the supervisor does not answer names these (Observed.HealthNames).
func (s *root) publishNames() {
	if !s.reg.changed {
		return
	}
	s.reg.changed = false
	ctrls := s.reg.ofKind(actors.KindController)
	names := make([]string, len(ctrls), len(ctrls)+s.reg.groups())
	for i, rec := range ctrls {
		names[i] = rec.spec.Name
	}
	s.obs.setHealthNames(s.tree.appendGroupNames(names))
}

// standing is where rec stands as the supervisor knows it, and the failure
// that put it there; answers is true instead when rec is to be asked (its
// actor is pending, starting or running).
func (rec *childRecord) standing() (standing childactor.Standing, cause error, answers bool) {
	if rec.pid == nil { // not spawned yet: its first start is to come
		return childactor.StandingNotStarted, nil, false
	}
	switch rec.state {
	case supervisor.StateStopped:
		if rec.stopRequested {
			return childactor.StandingStoppedOnRequest, nil, false
		}
		return childactor.StandingStopped, nil, false
	case supervisor.StateBackingOff:
		return childactor.StandingBackingOff, rec.lastErr(), false
	case supervisor.StateFailed:
		return childactor.StandingStartFailed, rec.lastErr(), false
	case supervisor.StateStopping:
		return childactor.StandingStopping, nil, false
	}
	return 0, nil, true
}

// queryHealth has col expect statuses, then asks recs[i] for each pending
// index i, then dispatches the health calls the children queued on col: the
// one way a sweep, a GetHealth's or a probe's, is sent.
//
// A large sweep is sent by one goroutine per processor, each the queries of
// a range of entries: sending is most of a sweep's cost (each child's
// mailbox runs inline on its sender), and the children are independent.
// Every query is sent before queryHealth returns, so the root's messages to
// each child keep their order.
func queryHealth(self actor.SenderContext, root *actor.RootContext, col *childactor.HealthCollector, recs []*childRecord, statuses []actors.HealthStatus, pending []int) {
	col.Expect(statuses, pending)
	senders := max(1, min(runtime.GOMAXPROCS(0), len(pending)/minQueriesPerSender))
	var sent sync.WaitGroup
	for k := 1; k < senders; k++ {
		part := pending[k*len(pending)/senders : (k+1)*len(pending)/senders]
		sent.Go(func() {
			for _, i := range part {
				root.Send(recs[i].pid, childactor.HealthQuery{Index: i, Collector: col})
			}
		})
	}
	for _, i := range pending[:len(pending)/senders] {
		self.Send(recs[i].pid, childactor.HealthQuery{Index: i, Collector: col})
	}
	sent.Wait()
	col.Dispatch()
}

// minQueriesPerSender is the least number of queries worth a sender
// goroutine of their own: fewer are sent faster than a goroutine starts.
const minQueriesPerSender = 512

// onProbeTick begins the liveness sweeps of the running controllers and
// webhooks of the levels that are due (dueAt): one sweep for each
// HealthTimeout among them, usually one.
func (s *root) onProbeTick() {
	if !s.supervising() || !s.probe.due() {
		return
	}
	defer s.probe.arm(s.reg.shortestProbe(s.tree.probeTiming.interval))
	// Controllers answer GetHealth; webhooks answer Ready (a webhook that
	// stays not ready after its Start returned is stuck, not warming up).
	now := s.clock.now()
	var batches []*probeBatch
	for _, rec := range s.reg.children {
		if (rec.spec.Kind != actors.KindController && rec.spec.Kind != actors.KindWebhook) || rec.state != supervisor.StateRunning {
			continue
		}
		timeout := rec.lvl.probeTiming.timeout
		if !rec.lvl.dueAt(&s.probe, now) {
			continue
		}
		i := slices.IndexFunc(batches, func(b *probeBatch) bool { return b.timeout == timeout })
		if i < 0 {
			i = len(batches)
			batches = append(batches, &probeBatch{timeout: timeout})
		}
		batches[i].recs = append(batches[i].recs, rec)
	}
	for _, b := range batches {
		s.sweep(b)
	}
}

// sweep asks every child of b for its health within b's timeout; the
// answers come back as a probeDone.
func (s *root) sweep(b *probeBatch) {
	recs := b.recs
	for _, rec := range recs {
		rec.lvl.probing = true // until its probeDone: each level is in one sweep
	}
	statuses := make([]actors.HealthStatus, len(recs))
	pending := make([]int, len(recs))
	gens := make([]uint64, len(recs))
	for i, rec := range recs {
		statuses[i].Name = rec.spec.Name
		pending[i] = i
		gens[i] = rec.gen
	}
	sweep := childactor.StartHealthSweep(s.self.system, s.cfg.Clock, b.timeout, func(col *childactor.HealthCollector) {
		queryHealth(s.ctx, s.self.system.Root, col, recs, statuses, pending)
	})
	done := probeDone{sweep: sweep, recs: recs, gens: gens}
	go func() {
		sweep.Wait(nil)
		s.self.send(done)
	}()
}

// onProbeDone counts unhealthy and silent children; UnhealthyThreshold in a
// row is a failure.
func (s *root) onProbeDone(m probeDone) {
	statuses, _ := m.sweep.Close()
	for _, rec := range m.recs {
		rec.lvl.probing = false
	}
	if !s.supervising() {
		return
	}
	for i, rec := range m.recs {
		if rec.gen != m.gens[i] || rec.state != supervisor.StateRunning || !s.reg.known(rec) {
			continue // restarted, stopped or removed since the sweep began
		}
		st := statuses[i]
		rec.setMessage(st.Message)
		if st.Healthy {
			rec.healthy = true
			rec.resetUnhealthy()
			continue
		}
		rec.healthy = false
		rec.hist().unhealthy++
		err := fmt.Errorf("%w: %s", supervisor.ErrUnhealthy, st.Message)
		s.publish(supervisor.ChildUnhealthy, rec, err)
		if rec.unhealthy() >= rec.lvl.probeTiming.threshold {
			err = fmt.Errorf("%s %q: unhealthy in %d health probes in a row: %w", rec.spec.Kind, rec.spec.Name, rec.unhealthy(), err)
			s.recordFailure(rec, err)
			s.supervise(rec, err)
		}
	}
}
