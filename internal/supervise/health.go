package supervise

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// probeState is the supervisor's liveness probing: one sweep at a time,
// every HealthInterval, from the moment webhooks have started (a standby's
// webhooks are probed too) until shutdown.
type probeState struct {
	timer    clock.Timer
	inFlight bool
	stopped  bool
}

type (
	// probeTick: time for the next liveness sweep.
	probeTick struct{}
	// probeDone: a liveness sweep has every answer, or its deadline passed.
	probeDone struct {
		sweep *childactor.HealthSweep
		recs  []*childRecord
		gens  []uint64
		began time.Time
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
	ctrls := s.ofKind(actors.KindController)
	// The groups' own lines come after the controllers', in the same slice:
	// room for them now, rather than a copy of every status to append them.
	statuses := make([]actors.HealthStatus, len(ctrls), len(ctrls)+len(s.byName)-len(s.children))
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
	s.queryHealth(col, ctrls, statuses, pending)
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
func (s *root) queryHealth(col *childactor.HealthCollector, recs []*childRecord, statuses []actors.HealthStatus, pending []int) {
	col.Expect(statuses, pending)
	senders := max(1, min(runtime.GOMAXPROCS(0), len(pending)/minQueriesPerSender))
	var sent sync.WaitGroup
	root := s.system.Root
	for k := 1; k < senders; k++ {
		part := pending[k*len(pending)/senders : (k+1)*len(pending)/senders]
		sent.Go(func() {
			for _, i := range part {
				root.Send(recs[i].pid, childactor.HealthQuery{Index: i, Collector: col})
			}
		})
	}
	for _, i := range pending[:len(pending)/senders] {
		s.ctx.Send(recs[i].pid, childactor.HealthQuery{Index: i, Collector: col})
	}
	sent.Wait()
	col.Dispatch()
}

// minQueriesPerSender is the least number of queries worth a sender
// goroutine of their own: fewer are sent faster than a goroutine starts.
const minQueriesPerSender = 512

// startProbes arms the first liveness sweep.
func (s *root) startProbes() {
	if s.cfg.Timing.HealthInterval <= 0 || s.probe != nil {
		return
	}
	s.probe = &probeState{}
	s.armProbe()
}

func (s *root) armProbe() {
	s.probe.timer = s.cfg.Clock.AfterFunc(s.cfg.Timing.HealthInterval, s.timerSend(func() any { return probeTick{} }))
}

func (s *root) stopProbes() {
	if s.probe == nil {
		return
	}
	s.probe.stopped = true
	if s.probe.timer != nil {
		s.probe.timer.Stop()
	}
}

func (s *root) onProbeTick() {
	p := s.probe
	if p == nil || p.stopped || !s.supervising() {
		return
	}
	s.armProbe()
	if p.inFlight {
		return // the last sweep is still waiting for its deadline
	}
	// Controllers answer GetHealth; webhooks answer Ready (a webhook that
	// stays not ready after its Start returned is stuck, not warming up).
	var recs []*childRecord
	for _, rec := range s.children {
		if (rec.spec.Kind == actors.KindController || rec.spec.Kind == actors.KindWebhook) && rec.state == supervisor.StateRunning {
			recs = append(recs, rec)
		}
	}
	if len(recs) == 0 {
		return
	}
	p.inFlight = true
	statuses := make([]actors.HealthStatus, len(recs))
	pending := make([]int, len(recs))
	gens := make([]uint64, len(recs))
	for i, rec := range recs {
		statuses[i].Name = rec.spec.Name
		pending[i] = i
		gens[i] = rec.gen
	}
	sweep := childactor.StartHealthSweep(s.system, s.cfg.Clock, s.cfg.Timing.HealthTimeout, func(col *childactor.HealthCollector) {
		s.queryHealth(col, recs, statuses, pending)
	})
	done := probeDone{sweep: sweep, recs: recs, gens: gens, began: s.now()}
	go func() {
		sweep.Wait(nil)
		s.sendSelf(done)
	}()
}

// onProbeDone counts unhealthy and silent children; UnhealthyThreshold in a
// row is a failure.
func (s *root) onProbeDone(m probeDone) {
	statuses, _ := m.sweep.Close()
	if s.probe != nil {
		s.probe.inFlight = false
	}
	if !s.supervising() {
		return
	}
	for i, rec := range m.recs {
		if rec.gen != m.gens[i] || rec.state != supervisor.StateRunning || s.byName[rec.spec.Name] != rec {
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
		if rec.unhealthy() >= s.cfg.Timing.UnhealthyThreshold {
			err = fmt.Errorf("%s %q: unhealthy in %d health probes in a row: %w", rec.spec.Kind, rec.spec.Name, rec.unhealthy(), err)
			s.recordFailure(rec, err)
			s.supervise(rec, err)
		}
	}
}
