package chaos

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// maxLifecycleInFlight bounds the lifecycle requests waiting for their
// answers (a StopChild waits for a hung Shutdown).
const maxLifecycleInFlight = 8

// requestTimeout bounds every lifecycle request: one not answered by then
// is a violation.
const requestTimeout = 30 * time.Second

// sendLifecycle sends a lifecycle message LifecycleRate times a second, and
// waits for the answers of those in flight before it returns.
func (h *Harness) sendLifecycle(ctx context.Context) {
	sem := make(chan struct{}, maxLifecycleInFlight)
	var wg sync.WaitGroup
	every(ctx, h.cfg.LifecycleRate, func() {
		select {
		case sem <- struct{}{}:
		default:
			h.stats.lifecycleSkips.Add(1)
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			h.lifecycleOp()
		})
	})
	wg.Wait()
}

// lifecycleOp sends one lifecycle message chosen at random.
func (h *Harness) lifecycleOp() {
	r := h.float()
	switch {
	case r < 0.15:
		h.getStatus()
	case r < 0.35:
		if c := h.randomLive(""); c != nil {
			_ = h.request(opRestart, c, supervisor.RestartChild{Name: c.name})
		}
	case r < 0.50:
		if c := h.randomLive(""); c != nil {
			if h.request(opStop, c, supervisor.StopChild{Name: c.name}) == nil {
				h.mu.Lock()
				h.stoppedByUs = append(h.stoppedByUs, c)
				h.mu.Unlock()
			}
		}
	case r < 0.72:
		h.mu.Lock()
		var c *child
		if n := len(h.stoppedByUs); n > 0 && h.float() < 0.8 {
			i := h.intN(n)
			c = h.stoppedByUs[i]
			h.stoppedByUs = slices.Delete(h.stoppedByUs, i, i+1)
		} else {
			c = h.randomLiveLocked("")
		}
		h.mu.Unlock()
		if c != nil {
			_ = h.request(opStart, c, supervisor.StartChild{Name: c.name})
		}
	default:
		// Children come and go, their number staying about where it began.
		h.mu.Lock()
		grow := len(h.live)+h.adding <= h.initial
		if grow {
			h.adding++
		}
		h.mu.Unlock()
		if grow {
			h.addChild()
			return
		}
		if c := h.randomLive(""); c != nil && h.request(opRemove, c, supervisor.RemoveChild{Name: c.name}) == nil {
			h.retire(c)
		}
	}
}

// addChild adds a child of a kind chosen at random.
func (h *Harness) addChild() {
	kinds := []actors.Kind{actors.KindController, actors.KindStore, actors.KindWebhook}
	c := h.newChild(kinds[h.intN(len(kinds))])
	err := h.request(opAdd, c, supervisor.AddChild{Runnable: c.value()})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.adding--
	if err == nil {
		h.live = append(h.live, c)
	} else {
		h.failedAdds = append(h.failedAdds, c)
	}
}

// retiredKept is how many removed children are kept (to post reviews to
// their paths, and for the events still on their way) before they are
// checked one last time and forgotten, so that the harness's memory stays
// bounded however long it runs.
const retiredKept = 64

// retire moves c, just removed from the manager, from the live children to
// the retired ones, and forgets the oldest retired child once checked.
func (h *Harness) retire(c *child) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = slices.DeleteFunc(h.live, func(l *child) bool { return l == c })
	h.stoppedByUs = slices.DeleteFunc(h.stoppedByUs, func(l *child) bool { return l == c })
	h.retired = append(h.retired, c)
	if len(h.retired) > retiredKept {
		old := h.retired[0]
		h.retired = slices.Delete(h.retired, 0, 1)
		h.checkRemoved(old)
		delete(h.byName, old.name)
		delete(h.byPath, old.path)
	}
}

// request sends a lifecycle message about c and checks its answer. While it
// is in flight, c's reported failures are not certain to be counted (the
// message may stop the incarnation that reported), so the checker stops
// expecting them.
func (h *Harness) request(op int, c *child, msg any) error {
	h.mu.Lock()
	c.tally.inFlight++
	if n := len(c.tally.expect); n > 0 {
		h.stats.mustTouched.Add(int64(n))
		clear(c.tally.expect)
	}
	if op == opRemove {
		c.tally.removeSent = time.Now()
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	_, err := h.mgr.Request(ctx, msg)
	cancel()
	h.mu.Lock()
	c.tally.inFlight--
	h.mu.Unlock()
	h.stats.lifecycle[op].Add(1)
	if err != nil {
		if h.allowed(err) {
			h.stats.lifecycleErrors[op].Add(1)
		} else {
			h.violate("%s %s: %v", opNames[op], c.name, err)
		}
	}
	return err
}

// allowed reports whether err is an answer a lifecycle message may get under
// chaos.
func (h *Harness) allowed(err error) bool {
	if _, ok := errors.AsType[*Fault](err); ok {
		return true // a start call the harness made fail
	}
	msg := err.Error()
	switch {
	case errors.Is(err, supervisor.ErrBusy), errors.Is(err, supervisor.ErrUnknownChild),
		strings.Contains(msg, "already running"), errors.Is(err, supervisor.ErrStartInterrupted):
		return true
	}
	h.mu.Lock()
	over := h.escalated != "" || h.ended
	h.mu.Unlock()
	return over && (errors.Is(err, supervisor.ErrNotRunning) || errors.Is(err, supervisor.ErrStopped) || errors.Is(err, supervisor.ErrShutdown))
}

// getStatus asks for the Status and checks it against the harness's view.
func (h *Harness) getStatus() {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, err := h.mgr.Status(ctx)
	h.stats.lifecycle[opStatus].Add(1)
	h.stats.statusCalls.Add(1)
	if err != nil {
		h.violate("GetStatus: %v", err)
		return
	}
	h.mu.Lock()
	over := h.escalated != "" || h.ended
	h.mu.Unlock()
	if !over && st.Phase != cm.PhaseRunning {
		h.violate("GetStatus: phase %s under chaos, want Running", st.Phase)
	}
}
