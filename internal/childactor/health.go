package childactor

import (
	"fmt"
	"sync"

	"github.com/actorkube/controllermanager/actors"
)

// healthCall is the one GetHealth (or Ready) call a child runs at a time, and
// the queries waiting for its answer: first, then more. The actor adds
// waiters; whoever runs the call (a worker of the first waiter's sweep, or a
// goroutine of its own for a query without a collector) takes them and
// answers each directly, with no extra mailbox hop.
//
// A call is in flight while first is set (it has somewhere to answer): no
// flag of its own, so that the child stays in its size class.
type healthCall struct {
	mu    sync.Mutex
	first HealthQuery
	more  *[]HealthQuery // the rare queries beyond the first
}

// inFlight reports whether a call runs. h.mu is held.
func (h *healthCall) inFlight() bool { return h.first.answers() }

// answers reports whether q has somewhere to answer.
func (q HealthQuery) answers() bool { return q.Collector != nil || q.ReplyTo != nil }

// callFailed is sent to the child by a hosted call other than start and stop
// (GetHealth, Ready, Handle) that panicked: a failure of the incarnation that
// was running when the call began.
type callFailed struct {
	gen uint64
	err error
}

func (c *child) queryHealth(q HealthQuery) {
	if !q.answers() {
		return // nobody to answer
	}
	// A controller is asked whether it runs or not (as furiko asks it),
	// except between a failure and its Shutdown's return, where the
	// supervisor's account is the truth.
	if c.state == stateStopping || c.state == stateStartFailed {
		c.answerHealth(q, c.standing().Status(c.spec.Name, nil))
		return
	}
	h := &c.health
	h.mu.Lock()
	if h.inFlight() {
		if h.more == nil {
			h.more = new([]HealthQuery)
		}
		*h.more = append(*h.more, q)
		h.mu.Unlock()
		return
	}
	h.first = q
	h.mu.Unlock()

	if q.Collector != nil {
		q.Collector.runs.push(q.Index, healthRun{c: c, gen: c.gen}, c.cfg.Goroutines)
		return
	}
	gen := c.gen
	c.cfg.Goroutines.Go(func() { c.runHealth(gen) })
}

// runHealth runs the health call of incarnation gen, off the actor, and
// answers every query waiting for it.
func (c *child) runHealth(gen uint64) {
	status, err := c.callHealth()
	if err != nil {
		c.system.Root.Send(c.self, callFailed{gen: gen, err: err})
	}
	h := &c.health
	h.mu.Lock()
	first, more := h.first, h.more
	h.first, h.more = HealthQuery{}, nil
	h.mu.Unlock()
	c.answerHealth(first, status)
	if more != nil {
		for _, q := range *more {
			c.answerHealth(q, status)
		}
	}
}

// answerHealth answers q with status.
func (c *child) answerHealth(q HealthQuery, status actors.HealthStatus) {
	if q.Collector != nil {
		q.Collector.answer(q.Index, status)
		return
	}
	c.system.Root.Send(q.ReplyTo, HealthAnswer{Index: q.Index, Status: status})
}

// callHealth runs the kind's health call. The answer always carries the
// child's name, whatever the controller put in it.
func (c *child) callHealth() (status actors.HealthStatus, err error) {
	switch c.spec.Kind {
	case actors.KindController:
		ctrl := c.spec.Impl.(actors.Controller)
		err = Call(c.spec.Kind, c.spec.Name, "GetHealth", func() error {
			status = ctrl.GetHealth()
			return nil
		})
	case actors.KindWebhook:
		wh := c.spec.Impl.(actors.Webhook)
		err = Call(c.spec.Kind, c.spec.Name, "Ready", func() error {
			status.Healthy = wh.Ready()
			if !status.Healthy {
				status.Message = "webhook not ready"
			}
			return nil
		})
	default:
		status.Healthy = true
	}
	status.Name = c.spec.Name
	if err != nil {
		status.Healthy = false
		status.Message = err.Error()
	}
	return status, err
}

func (c *child) callFailed(ctx actorContext, m callFailed) {
	if m.gen != c.gen || c.state != stateRunning {
		return
	}
	c.fail(ctx, m.err)
}

// standing is where the child stands when it cannot answer for itself: in
// any state but stateRunning (which answers by its own health call).
func (c *child) standing() Standing {
	switch c.state {
	case stateStarting:
		return StandingStarting
	case stateStartFailed:
		return StandingStartFailed
	case stateStopping:
		return StandingStopping
	}
	return StandingIdle
}

func errStartWhileActive(spec Spec) error {
	return fmt.Errorf("%s %q: start requested while an incarnation is still active", spec.Kind, spec.Name)
}
