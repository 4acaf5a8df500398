package controllermanager

import (
	"context"
	"runtime"
	"time"

	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// Unstopped is a child whose Shutdown had not returned when ShutdownAndWait
// gave up: its name, kind, how long its Shutdown had run, and the stack of
// the goroutine running it, an entry of UnstoppedError.Children. The
// fields are documented at actors.Unstopped.
type Unstopped = supervisor.Unstopped

// UnstoppedError lists the children that had not returned from Shutdown
// when a ShutdownAndWait's context ended; Err returns it from then on.
// errors.Is sees ErrUnstopped; errors.As finds it. Its one field,
// Children, is documented at supervisor.UnstoppedError.
type UnstoppedError = supervisor.UnstoppedError

// ErrUnstopped is wrapped by every UnstoppedError.
var ErrUnstopped = supervisor.ErrUnstopped

// ChildUnstopped is the event of a child whose Shutdown had not returned
// when a ShutdownAndWait's context ended; its Err is an *UnstoppedError
// naming that child alone.
const ChildUnstopped = supervisor.ChildUnstopped

// watchShutdown returns ctx carrying a new actors.ShutdownWatch, for the
// Shutdown calls of a ShutdownAndWait, which judges each against ctx as it
// returns (childactor.NewShutdownWatchUntil). When ctx has a deadline, the watch
// takes its stack dump shortly before it (the later of halfway there and
// 20ms plus 3µs per goroutine before it): the dump stops the world for
// about 1.5ms per thousand goroutines, and taken at the deadline it would
// make ShutdownAndWait late by as much. disarm cancels the early dump and
// closes the watch, once the ShutdownAndWait has reported.
func watchShutdown(ctx context.Context) (watched context.Context, watch *childactor.ShutdownWatch, disarm func()) {
	watch = childactor.NewShutdownWatchUntil(ctx)
	watched = childactor.WithShutdownWatch(ctx, watch)
	deadline, ok := ctx.Deadline()
	if !ok {
		return watched, watch, watch.Close
	}
	until := time.Until(deadline)
	lead := 20*time.Millisecond + time.Duration(runtime.NumGoroutine())*3*time.Microsecond
	if until <= 0 {
		return watched, watch, watch.Close
	}
	early := time.AfterFunc(max(until-lead, until/2), watch.Snapshot)
	return watched, watch, func() { early.Stop(); watch.Close() }
}

// reportUnstopped reports, once a ShutdownAndWait's context has ended
// (cause: its error, or the ask's), the children that overran it: in the
// log (one record per child, with its stack), as a ChildUnstopped event
// each, and in Err. It costs one dump of every goroutine's stack, and only
// when a child is stuck.
//
// One rule decides, on every run: the context ended before the last
// Shutdown returned. Those are the watch's calls that have not returned or
// returned after the context had ended (each call records that itself as
// it returns, so neither how soon this runs nor whether the manager has
// stopped meanwhile changes the verdict), and the children the supervisor
// last saw active that have not yet taken the Stop carrying the watch: the
// context may end before the supervisor has handed out the Stops (a
// starved process, a context that had ended already), and those children
// will return after it.
func (m *BaseManager) reportUnstopped(watch *childactor.ShutdownWatch, cause error) {
	stopped := false
	select {
	case <-m.Done():
		stopped = true // nothing is active; a Shutdown may have returned late all the same
	default:
	}
	// In this order, a child that takes its Stop meanwhile is found in
	// one of the three: active before watched, watched before judged.
	var active []supervise.ActiveChild
	if !stopped {
		active = m.handle.Observed.Active()
	}
	watched := watch.Watched()
	stuck := watch.Unstopped()
	listed := make(map[string]bool, len(stuck))
	for _, u := range stuck {
		listed[u.Name] = true
	}
	for _, c := range active {
		if !watched[c.Name] && !listed[c.Name] {
			stuck = append(stuck, Unstopped{Name: c.Name, Kind: c.Kind})
		}
	}
	if len(stuck) == 0 {
		if !stopped {
			// Every Shutdown returned before ctx ended; what remains (the
			// lease's release) is not a child's.
			m.opts.logger.Error("shutdown did not complete", "err", cause)
		}
		return
	}
	uerr := &UnstoppedError{Children: stuck}
	m.unstopped.Store(uerr)
	m.opts.logger.Error("shutdown did not complete: children did not return from Shutdown", "err", uerr, "cause", cause)
	now := time.Now()
	for _, u := range stuck {
		m.opts.logger.Error("child did not stop", "child", u.Name, "kind", u.Kind, "for", u.For,
			"goroutine", u.Goroutine, "stack", u.Stack)
		m.handle.Bus.Publish(Event{Type: ChildUnstopped, Time: now, Child: u.Name, Kind: string(u.Kind),
			Phase: m.handle.Observed.Phase(), Err: &UnstoppedError{Children: []Unstopped{u}}})
	}
}
