// Package controllermanager runs a service's controllers, stores and
// webhooks as supervised actors: furiko's controllermanager API, on a
// protoactor-go supervision tree.
//
// Each component added to a manager is hosted by an actor of its own, under
// a root supervisor actor whose messages drive the phases: pre-flight,
// leader election, store recovery, controller start, running, shutdown.
// A component that fails after start is restarted alone, with backoff,
// within a restart budget; health is gathered by querying the child actors
// with a deadline, so a stuck controller cannot hang a probe; and leadership
// is fenced: no controller runs without the lease, and the lease is given up
// only after every controller has stopped.
//
// See the package's docs/ directory for the architecture, the supervision
// semantics and leader election.
package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/metrics"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// Runnable is anything a manager shuts down when it stops. Shutdown should
// block until the component has terminated, and return early when ctx ends.
type Runnable = actors.Runnable

// Controller is a Runnable started by Run and probed by GetHealth. Run
// returns nil once the controller is started (its workers running), or an
// error if it cannot start. Its name is GetHealth().Name, or Name() when it
// has that method too.
//
// The context passed to Run is cancelled as soon as Run returns (it carries
// the start deadline and the Start caller's cancellation): work that
// outlives Run, an informer or a workqueue, runs on a context of its own
// that Shutdown cancels, derived with context.WithoutCancel(ctx) to keep
// what the manager put in it (FailureReporter). docs/architecture.md says
// why.
type Controller = actors.Controller

// Store is recovered once the manager is elected, before any controller
// runs.
type Store = actors.Store

// Webhook is an admission webhook, started by its manager and served at
// Path().
type Webhook = actors.Webhook

// HealthStatus is the health of one controller, as its GetHealth returns
// it and the manager's GetHealth lists it: its Name, whether it is Healthy,
// and a Message. The fields are documented at actors.HealthStatus.
type HealthStatus = actors.HealthStatus

// ErrNotReady is wrapped by GetReadiness's error while the manager is not
// ready.
var ErrNotReady = errors.New("controllermanager: not ready")

// BaseManager manages runnables, readiness and health, and is the root of
// the supervision tree that ControllerManager and WebhookManager build on.
// Its own Start runs the pre-flight (Context.Start) only; the runnables
// added to it are shut down by ShutdownAndWait.
type BaseManager struct {
	ctrlContext Context
	mode        supervise.Mode
	opts        options
	timing      supervise.Timing
	handle      *supervise.Handle
	metrics     *metrics.Manager
	election    *election   // nil when election is off
	events      *kubeEvents // nil when no Kubernetes Events are recorded

	// unstopped is set when a ShutdownAndWait gave up before every child
	// had returned from Shutdown; Err reports it.
	unstopped atomic.Pointer[UnstoppedError]
	// waits are the ShutdownAndWait calls in flight, each with its
	// context and watch: Err, and a ShutdownAndWait that saw the manager
	// stop, judge every one whose context has ended, as its own caller
	// does or is about to, so that no reader sees the manager stopped
	// before the verdict of a caller that overran is in.
	waitsMu sync.Mutex
	waits   []*shutdownWait

	mu      sync.Mutex
	added   []any // runnables and stores, in the order they were added; nil once started
	started bool  // Start has been called
	// flushed is closed once the manager's own recorder has written the
	// Events it had queued when the manager stopped (observe); nil when it
	// has none to write, or before Start.
	flushed chan struct{}
	// fleets are the fleets added to the manager, at any depth (bindFleets):
	// Status reads their clusters' states.
	fleets []*Fleet
}

// ControllerManager runs controllers after recovering stores, once elected
// when leader election is enabled.
//
// What it offers, by use:
//   - build: Add, AddStore (before Start);
//   - run: Serve (the whole host loop: Start, wait, ShutdownAndWait, the
//     exit error), or Start and ShutdownAndWait by hand;
//   - watch: Done and Err (stopped, and why), Subscribe (every event),
//     Status, GetHealth, GetReadiness, IsStarting, IsStarted;
//   - probe and serve: health.NewHandler(mgr), HealthzChecks,
//     LeaseWatchdog, Handler and WebhookHandler (admission), Gatherer
//     (metrics);
//   - steer while running: RestartChild, StopChild, StartChild, AddChild,
//     RemoveChild; Send, Request and PID for actor-native callers (the
//     lifecycle messages of package supervisor).
type ControllerManager struct {
	*BaseManager
}

// WebhookManager starts webhooks and serves their admission requests.
//
// It offers Add, Start, Serve and ShutdownAndWait; Handler and
// WebhookHandler (the admission endpoint); Done, Err, Subscribe, Status,
// GetHealth, GetReadiness, IsStarting, IsStarted; RestartChild, StopChild,
// StartChild, AddChild, RemoveChild, Send, Request and PID, as a
// ControllerManager does.
//
// It runs no controllers: its GetHealth is empty, and it becomes ready,
// starting and started together, once every webhook has started.
type WebhookManager struct {
	*BaseManager
}

var (
	_ interface {
		GetReadiness() error
		GetHealth() []HealthStatus
	} = (*ControllerManager)(nil)
	_ interface {
		GetReadiness() error
		GetHealth() []HealthStatus
	} = (*WebhookManager)(nil)
)

// NewBaseManager returns a manager whose Start runs the pre-flight only.
func NewBaseManager(ctrlContext Context, opts ...Option) *BaseManager {
	return newBaseManager(ctrlContext, supervise.ModeBase, defaultSupervision(), nil, collectOptions(opts))
}

// NewControllerManager returns a manager for controllers and stores,
// configured by ctrlCfg; defaultLeaseName names the Lease when ctrlCfg does
// not. An invalid configuration is an error that names every field at fault.
func NewControllerManager(ctrlContext Context, ctrlCfg ControllerManagerConfigSpec, defaultLeaseName string, opts ...Option) (*ControllerManager, error) {
	o := collectOptions(opts)
	sup, terr := ctrlCfg.Supervision.supervision()
	election, eerr := newElection(ctrlContext, ctrlCfg.LeaderElection, defaultLeaseName, o)
	if err := errors.Join(terr, eerr, o.invalid()); err != nil {
		return nil, fmt.Errorf("controllermanager: invalid config: %w", err)
	}
	if election != nil {
		o.leaseName = election.name
	}
	base := newBaseManager(ctrlContext, supervise.ModeControllers, sup, election, o)
	return &ControllerManager{BaseManager: base}, nil
}

// NewWebhookManager returns a manager for webhooks.
func NewWebhookManager(ctrlContext Context, opts ...Option) *WebhookManager {
	return &WebhookManager{BaseManager: newBaseManager(ctrlContext, supervise.ModeWebhooks, defaultSupervision(), nil, collectOptions(opts))}
}

func newBaseManager(ctrlContext Context, mode supervise.Mode, sup supervision, el *election, o options) *BaseManager {
	if ctrlContext == nil {
		ctrlContext = NewContext(nil)
	}
	m := &BaseManager{ctrlContext: ctrlContext, mode: mode, opts: o, timing: sup.timing, election: el}
	system := newActorSystem(o.logger)
	bus := supervise.NewBus(o.eventBuffer, o.logger)
	cfg := supervise.Config{
		Mode:      mode,
		Preflight: ctrlContext.Start,
		Policy:    sup.policy,
		Timing:    sup.timing,
		Logger:    o.logger,
		Clock:     o.clock,
		Bus:       bus,
		Observed:  supervise.NewObserved(),
		Tree:      groupTree,
	}
	el.configure(&cfg)
	identity := cfg.Identity
	handle, err := supervise.Spawn(system, "manager", cfg)
	if err != nil { // a fresh actor system has no actor of that name: cannot happen
		panic(err)
	}
	m.handle = handle
	m.metrics = newManagerMetrics(m, identity, o)
	m.events = el.kubeEvents(o)
	m.events.countDrops(m.metrics.KubeEventsDropped)
	return m
}

// Add adds runnables to the manager. A ControllerManager runs the
// Controllers among them (and starts Webhooks, before election); a
// WebhookManager starts the Webhooks; every other Runnable is only shut
// down. Add after Start has no effect; Add cannot fail, so a nil runnable,
// a duplicate name or an invalid one (empty, blank or holding a "/", at any
// depth: an error wrapping ErrInvalidName), or two webhooks with one Path()
// (ErrDuplicatePath), makes Start fail with an error naming it.
func (m *BaseManager) Add(runnables ...Runnable) {
	vals := make([]any, len(runnables))
	for i, r := range runnables {
		if r != nil {
			vals[i] = r
		}
	}
	m.add(vals)
}

func (m *BaseManager) add(vals []any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		m.opts.logger.Warn("Add after Start has no effect; use AddChild to add to a running manager", "count", len(vals))
		return
	}
	m.added = append(m.added, vals...)
}

// Start runs the pre-flight (Context.Start) and makes the manager ready.
// A ControllerManager's and a WebhookManager's Start do more; see theirs.
func (m *BaseManager) Start(ctx context.Context) error {
	return m.start(ctx, 0)
}

// start resolves the children's names, then has the supervisor start.
func (m *BaseManager) start(ctx context.Context, startTimeout time.Duration) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return fmt.Errorf("controllermanager: %w", supervisor.ErrStartTwice)
	}
	m.started = true
	added := m.added
	m.added = nil // the supervisor's records hold them from now on: not kept twice
	m.mu.Unlock()
	if _, stopped := m.handle.Observed.Final(); stopped {
		// Stopped before Start (ShutdownAndWait first): the answer is
		// known, and nothing (the Events recorder) is started for it.
		return startError(ctx, supervisor.ErrStopped)
	}
	m.observe()

	msg := supervise.StartManager{Ctx: ctx, StartTimeout: startTimeout}
	msg.Children, msg.Err = m.specs(added)
	if msg.Err == nil {
		msg.Err = startWebhookPaths(msg.Children) // two webhooks at one path: see ErrDuplicatePath
	}
	if err := m.opts.invalid(); err != nil {
		// NewWebhookManager and NewBaseManager return no error:
		// their options' is Start's (NewControllerManager's refused it).
		msg.Err = errors.Join(fmt.Errorf("invalid options: %w", err), msg.Err)
	}
	// The supervisor answers once the start has ended, and a start whose
	// context ends ends at once (ErrStartAbandoned, as soon as its shutdown
	// has begun): Start waits for that answer rather than returning on ctx,
	// so that GetReadiness, Status and Err agree with its error as soon as
	// it returns. The facade still returns should the manager's actors stop.
	_, err := m.ask(context.WithoutCancel(ctx), msg)
	return startError(ctx, err)
}

// startError words what ended a Start for the caller: the caller's
// cancellation, the manager stopped meanwhile, or the supervisor's reason.
func startError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && (errors.Is(err, supervise.ErrStartAbandoned) || errors.Is(err, ctx.Err())):
		if cause := context.Cause(ctx); cause != ctx.Err() {
			return fmt.Errorf("controllermanager: start abandoned, its context ended: %w: %w", ctx.Err(), cause)
		}
		return fmt.Errorf("controllermanager: start abandoned, its context ended: %w", ctx.Err())
	case errors.Is(err, supervisor.ErrStopped):
		return fmt.Errorf("controllermanager: start abandoned, the manager stopped: %w", supervisor.ErrStopped)
	default:
		return fmt.Errorf("controllermanager: start: %w", err)
	}
}

// GetHealth returns the health of every controller, in the order they were
// added: empty until the manager is starting (not yet elected is not
// unhealthy). Each controller is queried through its actor; one that does
// not answer within SupervisionSpec.HealthTimeout (on the clock of
// WithClock) is reported unhealthy, so GetHealth returns within that
// timeout whatever the controllers do. Should the supervisor itself not
// answer in time, every controller and group it would have listed (as its
// tree last changed: AddChild and RemoveChild included) is reported
// unhealthy, by the same names in the same order.
func (m *BaseManager) GetHealth() []HealthStatus {
	obs := m.handle.Observed
	if final, stopped := obs.Final(); stopped {
		return stoppedHealth(final, obs.Err())
	}
	if !obs.Starting() {
		return []HealthStatus{}
	}
	clk := m.opts.clockOrReal()
	defer m.metrics.ObserveProbe(clk, clk.Now())
	system := m.handle.System
	sweep := childactor.StartHealthSweep(system, clk, m.timing.HealthTimeout, func(col *childactor.HealthCollector) {
		system.Root.Send(m.handle.PID, supervise.GatherHealth{Collector: col})
	})
	sweep.Wait(obs.Terminated())
	statuses, ok := sweep.Close()
	if !ok {
		if final, stopped := obs.Final(); stopped {
			return stoppedHealth(final, obs.Err())
		}
		// The supervisor itself did not take the request in time: every
		// controller and group it lists is reported unhealthy, by the names
		// it published as its tree last changed (AddChild and RemoveChild
		// included), in the order of its answer.
		names := obs.HealthNames()
		out := make([]HealthStatus, len(names))
		for i, name := range names {
			out[i] = HealthStatus{Name: name, Message: fmt.Sprintf("the supervisor did not answer within %s", m.timing.HealthTimeout)}
		}
		return out
	}
	return statuses
}

// HealthTimeout is SupervisionSpec.HealthTimeout: GetHealth returns within
// it. health.NewHandler takes it as its probes' deadline.
func (m *BaseManager) HealthTimeout() time.Duration { return m.timing.HealthTimeout }

// stoppedHealth is GetHealth once the manager has stopped: every
// controller of final's tree, then every group, failed with msg, in the
// order and by the paths GetHealth gave them running (the supervisor's
// onGatherHealth): the controllers in the groups included, so none
// vanishes from /healthz, nor its /healthz/controller/<path> turns 404.
func stoppedHealth(final Status, cause error) []HealthStatus {
	msg := "manager stopped"
	if cause != nil {
		msg = "manager failed: " + cause.Error()
	}
	out := appendStoppedControllers([]HealthStatus{}, final.Children, msg)
	return appendStoppedGroups(out, final.Children, msg)
}

// appendStoppedControllers appends a failed line, msg, for each controller
// in children and in the groups among them, depth first in their order.
func appendStoppedControllers(out []HealthStatus, children []ChildStatus, msg string) []HealthStatus {
	for _, c := range children {
		switch {
		case c.Kind == actors.KindController:
			out = append(out, HealthStatus{Name: c.Name, Message: msg})
		case c.Kind.IsGroup():
			out = appendStoppedControllers(out, c.Children, msg)
		}
	}
	return out
}

// appendStoppedGroups appends a failed line, msg, for each group in
// children and under them: a group's own line, then its groups' (the
// order of the running lines, level.appendHealth).
func appendStoppedGroups(out []HealthStatus, children []ChildStatus, msg string) []HealthStatus {
	for _, c := range children {
		if c.Kind.IsGroup() {
			out = append(out, HealthStatus{Name: c.Name, Message: msg})
			out = appendStoppedGroups(out, c.Children, msg)
		}
	}
	return out
}

// GetReadiness returns nil once the pre-flight is done (for a
// WebhookManager, once every webhook has started) and until the manager
// shuts down, a standby replica waiting for the lease included; else an
// error wrapping ErrNotReady that says why.
func (m *BaseManager) GetReadiness() error {
	obs := m.handle.Observed
	if obs.Ready() {
		return nil
	}
	switch p := obs.Phase(); {
	case p == PhaseIdle:
		return fmt.Errorf("%w: manager not started", ErrNotReady)
	case p.Ended():
		if err := obs.Err(); err != nil {
			return fmt.Errorf("%w: manager failed: %v", ErrNotReady, err)
		}
		return fmt.Errorf("%w: manager stopped", ErrNotReady)
	case p == PhaseShuttingDown:
		return fmt.Errorf("%w: manager shutting down", ErrNotReady)
	default:
		return fmt.Errorf("%w: manager not fully initialized (phase %s)", ErrNotReady, p)
	}
}

// IsStarting reports whether the manager has been elected (or needs no
// election) and begun to recover stores and start controllers.
func (m *BaseManager) IsStarting() bool { return m.handle.Observed.Starting() }

// IsStarted reports whether every controller has started.
func (m *BaseManager) IsStarted() bool { return m.handle.Observed.Started() }

// ShutdownAndWait shuts the manager down and waits until it has stopped or
// ctx ends, whichever is first:
//
//  1. a Start in progress ends with an error; restarts and probes stop;
//  2. every child's Shutdown(ctx) runs in parallel (controllers, webhooks,
//     stores that are Runnables, plain runnables);
//  3. once every Shutdown has returned, and only then, the lease is given up;
//  4. the manager enters Stopped (Done is closed), its actors stop and the
//     event subscribers receive the last events; ShutdownAndWait waits for
//     the manager's own Kubernetes Events to be written (its recorder gives
//     up on those not written within five seconds), then for
//     the subscribers to take the last events for at most
//     WithSubscriberDrainTimeout (default one second), so that a subscriber
//     that blocks never holds it.
//
// Whether the shutdown overran is decided by one rule, the same on every
// run: it overran when ctx ended before the last Shutdown returned. A
// Shutdown that returns because ctx has ended (one that honours its
// context) returned after it, so it overran, however soon it returned and
// whichever of the two ShutdownAndWait saw first; one that returned before
// ctx ended did not, even when ctx ends before the lease has been given up.
// Each Shutdown call records which it was as it returns.
//
// When ctx ends first, ShutdownAndWait returns at once and reports the
// children that overran (an UnstoppedError: each one's name, how long its
// Shutdown has run and the stack of the goroutine running it; a child
// whose Shutdown returned after ctx ended is named with how long it ran; a
// child whose Shutdown had not even been called yet, because ctx ended
// before the manager had handed out the Stops, is named too, with an empty
// Call), in the log, as a ChildUnstopped event each, and in Err, which
// returns it from the moment ctx has ended (see Err); a ShutdownAndWait
// of another caller that sees the manager stop returns after that report
// too. The same report is
// made when the manager stopped but ctx ended on the way, with a Shutdown
// that returned after it. Done is not closed
// then: the manager goes on waiting for those Shutdown calls; it keeps the
// lease until they return (the lease then expires on its own if the process
// exits). Calling it again waits again; calling it before Start stops the
// manager at once.
func (m *BaseManager) ShutdownAndWait(ctx context.Context) {
	watched, watch, disarm := watchShutdown(ctx)
	defer disarm()
	w := m.addWait(ctx, watch)
	defer m.dropWait(w)
	if _, err := m.ask(watched, supervisor.ShutdownManager{Ctx: watched}); err != nil && !errors.Is(err, supervisor.ErrStopped) {
		w.once.Do(func() { m.reportUnstopped(watch, err) })
		return
	} else if ctx.Err() != nil {
		// Stopped, but ctx ended on the way: whether a Shutdown returned
		// after it is decided by the same rule, not by which of the two
		// this goroutine happened to see first.
		w.once.Do(func() { m.reportUnstopped(watch, ctx.Err()) })
	}
	select {
	case <-m.handle.Observed.Terminated():
	case <-ctx.Done():
		return
	}
	// Another caller's context may have ended before the last Shutdown
	// returned: its verdict is this caller's answer too.
	m.judgeEndedWaits()
	// The manager's own Kubernetes Events of the end are written before the
	// host, which exits on return, is answered: the recorder bounds its
	// flush itself (kubeevents.FlushTimeout), not by the subscribers' drain.
	m.mu.Lock()
	flushed := m.flushed
	m.mu.Unlock()
	if flushed != nil {
		select {
		case <-flushed:
		case <-ctx.Done():
			return
		}
	}
	// The last events reach the subscribers, but a subscriber that blocks
	// must not hold the host's shutdown: its wait is bounded.
	drain := m.opts.subscriberDrain()
	if drain <= 0 {
		return
	}
	timer := m.opts.clockOrReal().NewTimer(drain)
	defer timer.Stop()
	select {
	case <-m.handle.Bus.Drained():
	case <-ctx.Done():
	case <-timer.C():
		m.opts.logger.Warn("event subscribers did not take the last events in time; not waiting for them",
			"timeout", drain)
	}
}

// Done is closed once the manager has stopped: requested, escalated, lost
// its lease or failed to start; Err then says why. The last events may still be on their way
// to subscribers then; ShutdownAndWait, even on a stopped manager, waits
// for them (bounded by WithSubscriberDrainTimeout).
func (m *BaseManager) Done() <-chan struct{} { return m.handle.Observed.Done() }

// Err is why the manager stopped: nil while it runs and after a requested
// shutdown that finished within its context; an *EscalationError, an error
// wrapping lease.ErrLost, or the error that ended Start, otherwise. A
// ShutdownAndWait whose context ended before the last Shutdown returned
// has overrun, whether that Shutdown was still running when ShutdownAndWait
// returned or returned just after the context ended (as one that honours
// its context does): from the moment the context has ended, on every run
// and whether or not Done is closed yet or that ShutdownAndWait has
// returned yet, Err reports those children (it makes the verdict itself if
// that caller has not yet), and goes on reporting them once they have
// stopped: an *UnstoppedError (errors.Is ErrUnstopped; joined to the
// cause, if any). So every reader reads one answer: a host reading Err at
// Done, another ShutdownAndWait, Serve. It is nil after a
// ShutdownAndWait whose context ended once every child had returned from
// Shutdown (only the lease's release was left).
func (m *BaseManager) Err() error {
	// A ShutdownAndWait whose context ended before the last Shutdown
	// returned has overrun, whether or not its caller has reported yet.
	m.judgeEndedWaits()
	err := m.handle.Observed.Err()
	if u := m.unstopped.Load(); u != nil {
		if err == nil {
			return u
		}
		return errors.Join(err, u)
	}
	return err
}

// Subscribe registers fn for every event from now on, delivered in order on
// a goroutine of fn's own: a slow or panicking fn never stalls supervision.
// A subscriber that falls more than the event buffer behind loses the
// oldest events it has not received and is told so by an EventsDropped
// event. cancel stops the deliveries.
func (m *BaseManager) Subscribe(fn func(Event)) (cancel func()) {
	return m.handle.Bus.Subscribe(fn)
}

// Send sends a lifecycle message (package supervisor) to the root
// supervisor, without waiting for its answer; RestartChild, StopChild and
// StartChild are the typed calls that wait. An AddChild that brings a
// Fleet of another manager (ErrFleetInUse) is not sent, and is logged. A
// message the supervisor refuses (a StartChild or RestartChild of an
// Offline member cluster's group, ErrClusterOffline, among others) does
// not act, and the supervisor logs the refusal, since nobody waits for
// its answer.
func (m *BaseManager) Send(msg any) {
	if add, ok := msg.(supervisor.AddChild); ok {
		if err := m.bindFleets([]any{add.Runnable}); err != nil {
			m.opts.logger.Error("a lifecycle message was not sent", "msg", supervise.Describe(msg), "err", err)
			return
		}
	}
	m.handle.System.Root.Send(m.handle.PID, msg)
}

// Request sends a lifecycle message to the root supervisor and waits for its
// answer or for ctx, whichever is first. After the manager has stopped,
// GetStatus answers the final Status and other messages
// supervisor.ErrStopped. A ctx that has ended already returns an error
// wrapping ctx's error, and nothing is sent: the message does not act. The
// supervisor refuses a StartChild or RestartChild of an Offline member
// cluster's group of a Fleet, or of anything in it, with ErrClusterOffline.
func (m *BaseManager) Request(ctx context.Context, msg any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", supervise.Describe(msg), err)
	}
	if _, ok := msg.(supervisor.GetStatus); ok {
		if final, stopped := m.handle.Observed.Final(); stopped {
			return final, nil
		}
	}
	if add, ok := msg.(supervisor.AddChild); ok {
		// A fleet goes wherever a group goes, by AddChild or by this
		// message with a Parent: it learns its manager either way.
		if err := m.bindFleets([]any{add.Runnable}); err != nil {
			return nil, fmt.Errorf("%s: %w", supervise.Describe(msg), err)
		}
	}
	v, err := m.ask(ctx, msg)
	if err != nil && errors.Is(err, supervisor.ErrStopped) {
		if final, stopped := m.handle.Observed.Final(); stopped {
			if _, ok := msg.(supervisor.GetStatus); ok {
				return final, nil
			}
		}
	}
	return v, err
}

// Status returns the manager's Status (supervisor.GetStatus): its phase,
// the lease holder it last observed, every child's state.
func (m *BaseManager) Status(ctx context.Context) (Status, error) {
	v, err := m.Request(ctx, supervisor.GetStatus{})
	if err != nil {
		return Status{}, err
	}
	st := v.(Status)
	m.fleetStatus(&st)
	return st, nil
}

// AddChild adds a controller, webhook, store or runnable to the running
// manager and waits until it has started; it is then supervised like the
// others. Its name comes from its Name method or, for a controller, from
// GetHealth().Name. A group (NewGroup) is added whole, at the root: its
// children start one after another, at each level its stores first, and
// AddChild returns once they have (supervisor.AddChild's Parent adds a
// child or a group under a group). An empty or blank name, or one holding
// a "/" (its own or one inside a group it brings), is refused with an error
// wrapping ErrInvalidName; a name taken already, with ErrDuplicateChild; a
// webhook whose Path() another webhook of the manager (or of the group)
// has, with ErrDuplicatePath, naming both (a Request of
// supervisor.AddChild is not checked). A ctx that has ended already
// returns an error wrapping ctx's error, and nothing is added.
func (m *BaseManager) AddChild(ctx context.Context, child any) error {
	if err := m.addChildWebhookPaths(child, "", ""); err != nil {
		return fmt.Errorf("controllermanager: add child: %w", err)
	}
	_, err := m.Request(ctx, supervisor.AddChild{Runnable: child})
	return err
}

// RemoveChild shuts the named child down and removes it from the manager:
// it is gone from health and status. A group goes whole: its children shut
// down together, then everything under it is removed. A ctx that has ended
// already returns an error wrapping ctx's error, and nothing is removed;
// when ctx ends before the Shutdown returns, RemoveChild returns that error
// and the removal goes on.
func (m *BaseManager) RemoveChild(ctx context.Context, name string) error {
	_, err := m.Request(ctx, supervisor.RemoveChild{Name: name})
	return err
}

// RestartChild restarts the named controller, webhook or store
// (supervisor.RestartChild): its Shutdown, then its start call (Run,
// Start, Recover) again, at once, without backoff and without counting
// against its restart budget; a stopped child is started. It returns once
// the start call has returned: nil when it started, else an error wrapping
// the start call's error (the failure is then supervised like any other).
// A name the manager does not know returns an error matching
// errors.Is(err, ErrUnknownChild); a child already being started, stopped
// or restarted, ErrBusy; a plain runnable, ErrNothingToStart; a manager
// that is not running, ErrNotRunning or ErrStopped; an Offline member
// cluster's group of a Fleet, or anything in it, ErrClusterOffline.
//
// A ctx that has ended already returns an error wrapping ctx's error, and
// nothing is restarted. The new incarnation never starts before the old
// one's Shutdown has returned: when ctx ends while a Shutdown hangs,
// RestartChild returns an error wrapping ctx's error at once, and the
// restart goes on without a caller: the child stays Stopping (ErrBusy to
// further RestartChild and StartChild calls) until its Shutdown returns,
// then runs again. A Shutdown that honours its context returns within
// SupervisionSpec.ShutdownTimeout.
//
// name is the child's name; once groups exist it is a path, "group/child".
func (m *BaseManager) RestartChild(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restart of child %q: %w", name, err)
	}
	_, err := m.Request(ctx, supervisor.RestartChild{Name: name})
	return err
}

// StopChild shuts the named child down (supervisor.StopChild) and leaves
// it stopped, in Status and health, until StartChild or RestartChild: a
// stop is not a failure, and a stopped child is not supervised. It returns
// nil once the child's Shutdown has returned. A name the manager does not
// know returns an error matching errors.Is(err, ErrUnknownChild); a manager
// that is not running, ErrNotRunning or ErrStopped. A ctx that has ended
// already returns an error wrapping ctx's error, and nothing is stopped;
// when ctx ends before the Shutdown returns, StopChild returns that error
// and the Shutdown goes on.
//
// name is the child's name; once groups exist it is a path, "group/child".
func (m *BaseManager) StopChild(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop of child %q: %w", name, err)
	}
	_, err := m.Request(ctx, supervisor.StopChild{Name: name})
	return err
}

// StartChild starts the named child again after StopChild
// (supervisor.StartChild) and returns once its start call has returned:
// nil when it started, else an error wrapping the start call's error (the
// failure is then supervised like any other). A name the manager does not
// know returns an error matching errors.Is(err, ErrUnknownChild); a child
// being started, stopped or restarted, ErrBusy; a child that runs already,
// ErrAlreadyRunning; a manager that is not running, ErrNotRunning or
// ErrStopped; an Offline member cluster's group of a Fleet, or anything in
// it, ErrClusterOffline. A ctx that has ended already returns an error
// wrapping ctx's error, and nothing is started; when ctx ends before the
// start call returns, StartChild returns that error and the start goes on.
//
// name is the child's name; once groups exist it is a path, "group/child".
func (m *BaseManager) StartChild(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start of child %q: %w", name, err)
	}
	_, err := m.Request(ctx, supervisor.StartChild{Name: name})
	return err
}

// PID is the root supervisor's PID, for actor-native callers: requests to it
// are answered with a supervisor.Reply.
func (m *BaseManager) PID() *actor.PID { return m.handle.PID }

func (m *BaseManager) ask(ctx context.Context, msg any) (any, error) {
	return supervise.Ask(ctx, m.handle.System, m.handle.PID, m.handle.Observed.Terminated(), msg)
}

// Add adds runnables: Controllers are run, Webhooks started (before
// election), other Runnables only shut down. See BaseManager.Add.
func (m *ControllerManager) Add(runnables ...Runnable) { m.BaseManager.Add(runnables...) }

// AddStore adds stores to be recovered once elected, before any controller
// runs. AddStore after Start has no effect.
func (m *ControllerManager) AddStore(stores ...Store) {
	vals := make([]any, len(stores))
	for i, s := range stores {
		if s != nil {
			vals[i] = s
		}
	}
	m.add(vals)
}

// Start starts the manager and blocks until every controller has started:
// the pre-flight (Context.Start), then readiness, then webhooks, then the
// election (blocking until elected), then IsStarting, then every store's
// Recover in parallel, then every controller's Run in parallel, then
// IsStarted. startTimeout > 0 bounds recovery plus start.
//
// Any failure returns an error that wraps its cause (errors.Is sees a
// controller's error, context.DeadlineExceeded after startTimeout, the
// caller's context error). A failed Start shuts down what it had started
// and the manager ends in PhaseFailed; ShutdownAndWait waits for that. A
// Start whose context ends is the caller asking to stop: the manager shuts
// down and ends in PhaseStopped. Start returns once that shutdown has
// begun (not once it has ended), so what the manager reports from then on
// (GetReadiness, Status) agrees with its error.
func (m *ControllerManager) Start(ctx context.Context, startTimeout time.Duration) error {
	return m.start(ctx, startTimeout)
}

// GetHealth returns every controller's health; see BaseManager.GetHealth.
func (m *ControllerManager) GetHealth() []HealthStatus { return m.BaseManager.GetHealth() }

// HealthzChecks are the checks health.NewHandler adds to /healthz for this
// manager (health.CheckProvider): the lease watchdog, with election on.
func (m *ControllerManager) HealthzChecks() []health.Checker {
	if w := m.LeaseWatchdog(); w != nil {
		return []health.Checker{w}
	}
	return nil
}

// ShutdownAndWait shuts the manager down, gives the lease up only after
// every runnable has returned, and waits; see BaseManager.ShutdownAndWait.
func (m *ControllerManager) ShutdownAndWait(ctx context.Context) { m.BaseManager.ShutdownAndWait(ctx) }

// Add adds runnables: Webhooks are started, other Runnables only shut down.
func (m *WebhookManager) Add(runnables ...Runnable) { m.BaseManager.Add(runnables...) }

// Start runs the pre-flight, then every webhook's Start in parallel; once
// all have started the manager is ready, starting and started together.
func (m *WebhookManager) Start(ctx context.Context) error { return m.start(ctx, 0) }

// shutdownWait is one ShutdownAndWait in flight: its context and watch;
// once makes its verdict (reportUnstopped), whichever caller gets there
// first, and the others wait for it.
type shutdownWait struct {
	ctx   context.Context
	watch *childactor.ShutdownWatch
	once  sync.Once
}

func (m *BaseManager) addWait(ctx context.Context, watch *childactor.ShutdownWatch) *shutdownWait {
	w := &shutdownWait{ctx: ctx, watch: watch}
	m.waitsMu.Lock()
	m.waits = append(m.waits, w)
	m.waitsMu.Unlock()
	return w
}

// dropWait: w's caller returns, having made its verdict if it had one to
// make (a context that ended once every Shutdown had returned has none:
// nobody judges it after).
func (m *BaseManager) dropWait(w *shutdownWait) {
	w.once.Do(func() {})
	m.waitsMu.Lock()
	m.waits = slices.DeleteFunc(m.waits, func(x *shutdownWait) bool { return x == w })
	m.waitsMu.Unlock()
}

// judgeEndedWaits makes, once each, the verdict of every ShutdownAndWait
// in flight whose context has ended: the one its own caller makes, or is
// making (then this waits for it).
func (m *BaseManager) judgeEndedWaits() {
	m.waitsMu.Lock()
	if len(m.waits) == 0 {
		m.waitsMu.Unlock()
		return
	}
	waits := slices.Clone(m.waits)
	m.waitsMu.Unlock()
	for _, w := range waits {
		if err := w.ctx.Err(); err != nil {
			w.once.Do(func() { m.reportUnstopped(w.watch, err) })
		}
	}
}
