package supervise

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/supervisor"
)

// Facade plumbing: Observed is the state a manager's facade reads without a
// message: the
// root supervisor writes it, anyone may read it. It is a published copy; the
// supervisor's own state is the truth.
type Observed struct {
	phase    atomic.Pointer[supervisor.Phase]
	ready    atomic.Bool
	starting atomic.Bool
	started  atomic.Bool
	leader   atomic.Bool
	webhooks atomic.Pointer[WebhookTable] // see webhooks.go

	// With sharded leadership: shards held now, and how many times a shard
	// was acquired, released and lost so far.
	shardsHeld                                 atomic.Int64
	shardsAcquired, shardsReleased, shardsLost atomic.Int64

	done       chan struct{} // closed once the manager has stopped
	terminated chan struct{} // closed once the actor tree has stopped

	mu    sync.Mutex
	err   error
	final *supervisor.Status

	// healthNames is what the supervisor's GetHealth lists, by name and
	// in its order, as the tree last changed: see HealthNames.
	healthNames atomic.Pointer[[]string]

	// active is the children that have not stopped (Starting, Running,
	// Failed, Stopping), by their Spec, whose name and kind never change
	// once recorded: see Active. A pointer key is a third of the entry a
	// name and a kind took, for every running child.
	activeMu sync.Mutex
	active   map[*childactor.Spec]struct{}
}

// Facade plumbing: ActiveChild is a child that has not stopped, as Active
// reports it.
type ActiveChild struct {
	Name string
	Kind actors.Kind
}

// Facade plumbing: Active returns, sorted by name, the children that have
// not stopped (Starting, Running, Failed, Stopping) as the supervisor last
// set them. A ShutdownAndWait that gives up before the supervisor has
// taken its request, or handed out its Stops, names them from here.
func (o *Observed) Active() []ActiveChild {
	o.activeMu.Lock()
	out := make([]ActiveChild, 0, len(o.active))
	for spec := range o.active {
		out = append(out, ActiveChild{Name: spec.Name, Kind: spec.Kind})
	}
	o.activeMu.Unlock()
	slices.SortFunc(out, func(a, b ActiveChild) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Facade plumbing: HealthNames returns the names the supervisor's answer
// to a GetHealth lists, in its order (every controller, in the groups
// included, then every group), as the tree was when it last changed: a
// GetHealth the supervisor does not answer in time names these. The
// slice is shared: do not modify it.
func (o *Observed) HealthNames() []string {
	if p := o.healthNames.Load(); p != nil {
		return *p
	}
	return nil
}

func (o *Observed) setHealthNames(names []string) { o.healthNames.Store(&names) }

// setActive records whether the child spec describes is active.
func (o *Observed) setActive(spec *childactor.Spec, active bool) {
	o.activeMu.Lock()
	defer o.activeMu.Unlock()
	if !active {
		delete(o.active, spec)
		return
	}
	if o.active == nil {
		o.active = map[*childactor.Spec]struct{}{}
	}
	o.active[spec] = struct{}{}
}

// Facade plumbing: NewObserved returns the state of a manager in phase Idle.
func NewObserved() *Observed {
	o := &Observed{done: make(chan struct{}), terminated: make(chan struct{})}
	idle := supervisor.PhaseIdle
	o.phase.Store(&idle)
	return o
}

// Phase is the manager's phase.
func (o *Observed) Phase() supervisor.Phase { return *o.phase.Load() }

// Ready reports whether the pre-flight is done (for a webhook manager: every
// webhook started) and the manager has not stopped.
func (o *Observed) Ready() bool { return o.ready.Load() }

// Starting reports whether the manager has been elected and begun to recover
// and start.
func (o *Observed) Starting() bool { return o.starting.Load() }

// Started reports whether every controller has started.
func (o *Observed) Started() bool { return o.started.Load() }

// Leader reports whether this replica holds the lease.
func (o *Observed) Leader() bool { return o.leader.Load() }

// ShardMoves returns, with sharded leadership, how many shards this replica
// holds now and how many times it acquired, released and lost one so far.
func (o *Observed) ShardMoves() (held, acquired, released, lost int64) {
	return o.shardsHeld.Load(), o.shardsAcquired.Load(), o.shardsReleased.Load(), o.shardsLost.Load()
}

// Done is closed once the manager has stopped (Stopped or Failed).
func (o *Observed) Done() <-chan struct{} { return o.done }

// Terminated is closed once the manager's actors have all stopped, after Done.
func (o *Observed) Terminated() <-chan struct{} { return o.terminated }

// Err is why the manager stopped: nil while it runs and after a requested
// shutdown.
func (o *Observed) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Final is the manager's last Status, once it has stopped.
func (o *Observed) Final() (supervisor.Status, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.final == nil {
		return supervisor.Status{}, false
	}
	return *o.final, true
}

func (o *Observed) setPhase(p supervisor.Phase) { o.phase.Store(&p) }

func (o *Observed) finish(err error, final supervisor.Status) {
	o.mu.Lock()
	o.err = err
	o.final = &final
	o.mu.Unlock()
	o.ready.Store(false)
	o.leader.Store(false)
	close(o.done)
}
