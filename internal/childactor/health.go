package childactor

import (
	"fmt"
	"sync"

	"github.com/actorkube/controllermanager/actors"
)

// healthCall is the one GetHealth (or Ready) call a child runs at a time, and
// the queries waiting for its answer. The actor adds waiters; the goroutine
// running the call takes them and answers each directly, so a health answer
// costs one goroutine and no extra mailbox hop.
type healthCall struct {
	mu       sync.Mutex
	inFlight bool
	waiters  []HealthQuery
}

// callFailed is sent to the child by a hosted call other than start and stop
// (GetHealth, Ready, Handle) that panicked: a failure of the incarnation that
// was running when the call began.
type callFailed struct {
	gen uint64
	err error
}

func (c *child) queryHealth(q HealthQuery) {
	// A controller is asked whether it runs or not (as furiko asks it),
	// except between a failure and its Shutdown's return, where the
	// supervisor's account is the truth.
	if c.state == stateStopping || c.state == stateStartFailed {
		c.system.Root.Send(q.ReplyTo, HealthAnswer{Index: q.Index, Status: c.standing().Status(c.spec.Name, nil)})
		return
	}
	h := &c.health
	h.mu.Lock()
	h.waiters = append(h.waiters, q)
	if h.inFlight {
		h.mu.Unlock()
		return
	}
	h.inFlight = true
	h.mu.Unlock()

	gen, self, system := c.gen, c.self, c.system
	c.cfg.Goroutines.Go(func() {
		status, err := c.callHealth()
		if err != nil {
			system.Root.Send(self, callFailed{gen: gen, err: err})
		}
		h.mu.Lock()
		waiters := h.waiters
		h.waiters = nil
		h.inFlight = false
		h.mu.Unlock()
		for _, w := range waiters {
			system.Root.Send(w.ReplyTo, HealthAnswer{Index: w.Index, Status: status})
		}
	})
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
