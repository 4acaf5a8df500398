package liveview

import (
	"errors"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"
)

// Status is the JSON of status.json and of the event stream's
// "status" events: a supervisor.Status with its errors as text, and what the
// handler has seen of the event stream.
type Status struct {
	// Time is the server's clock when the Status was taken: the page measures
	// time in state against it, not against the browser's clock.
	Time       time.Time  `json:"time"`
	Phase      string     `json:"phase"`
	Err        *Error     `json:"error,omitempty"` // why the manager stopped
	Leadership Leadership `json:"leadership"`
	Children   []Child    `json:"children"`
	// Events are the newest events the handler has seen (at most 200),
	// oldest first.
	Events []Event `json:"events"`
	// HistorySince is when the handler began to record events: failure
	// history and events before it are unknown.
	HistorySince time.Time `json:"historySince"`
	// WindowSeconds is how far back each child's RecentFailures go.
	WindowSeconds float64  `json:"windowSeconds"`
	Controls      Controls `json:"controls"`
}

// Leadership is the leader election as the manager reports it.
type Leadership struct {
	// Enabled is false with election off (the manager has no identity).
	Enabled  bool   `json:"enabled"`
	Leader   bool   `json:"leader"`             // this replica holds the lease
	Identity string `json:"identity,omitempty"` // this replica's identity
	Holder   string `json:"holder,omitempty"`   // the holder last observed
	// LeaderSince is when this replica last acquired the lease, if the
	// handler saw it happen (absent when it became leader before the
	// handler was made, or is not leader).
	LeaderSince *time.Time `json:"leaderSince,omitempty"`
	// Shards is every shard's state, with sharded leadership (Status.Shards);
	// absent otherwise.
	Shards []Shard `json:"shards,omitempty"`
	// Renewal is the outcome of the manager's lease watchdog check, where it
	// has one (a health.CheckProvider's "leaderElection" check): "ok", or why the
	// renewal is overdue. The Status carries no renewal time, so the page
	// shows this instead of the age of the last renewal.
	Renewal string `json:"renewal,omitempty"`
}

// Child is one child of the manager, or of one of its groups: Name is its
// path ("tenant-a/store" for a child of group "tenant-a").
type Child struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	State string `json:"state"`
	// Incarnation counts the child's start calls: 0 while Pending, then
	// Restarts+1 (derived: a Status has no incarnation of its own).
	Incarnation int    `json:"incarnation"`
	Restarts    int    `json:"restarts"`
	Failures    int    `json:"failures"`
	Healthy     bool   `json:"healthy"`
	Message     string `json:"message,omitempty"`
	// LastError is the last failure, with the panic stack when it was a panic.
	LastError *Error    `json:"lastError,omitempty"`
	Since     time.Time `json:"since"` // when it entered State
	// RecentFailures are the times of the failures the handler saw within
	// the window, oldest first.
	RecentFailures []time.Time `json:"recentFailures"`
	// Children are a group's children, in start order, each with its path
	// as Name (Kind "group" or "cluster"); absent for every other kind.
	Children []Child `json:"children,omitempty"`
	// Group is the supervision a group applies to its children and the
	// budget they have spent (Kind "group" or "cluster"); absent for every
	// other kind.
	Group *Group `json:"group,omitempty"`
	// Cluster is where a fleet's member cluster stands (Kind "cluster");
	// absent for every other kind.
	Cluster *Cluster `json:"cluster,omitempty"`
}

// Cluster is a fleet's member cluster (supervisor.ClusterInfo).
type Cluster struct {
	State      string     `json:"state"` // Engaging, Online, Offline or Failed
	Since      time.Time  `json:"since"`
	LastProbe  *time.Time `json:"lastProbe,omitempty"`  // absent before the first probe
	ProbeError string     `json:"probeError,omitempty"` // the last probe's failure
	Error      string     `json:"error,omitempty"`      // why Offline or Failed
	Problem    string     `json:"problem,omitempty"`    // its provider's last problem engaging it
	// Shard is the shard that runs it, with sharded leadership; absent
	// otherwise.
	Shard  *int   `json:"shard,omitempty"`
	Holder string `json:"holder,omitempty"` // the replica holding that shard (or the lease)
}

// Group is a group's supervision (supervisor.GroupStatus), its fields
// inherited from its parent's where its own spec leaves them zero.
type Group struct {
	Strategy string `json:"strategy"` // OneForOne, AllForOne or RestForOne
	// MaxRestarts is how many restarts each child may have within the
	// window before the next failure spends the group's budget.
	MaxRestarts          int     `json:"maxRestarts"`
	RestartWindowSeconds float64 `json:"restartWindowSeconds"`
	// OnExhausted is what a spent budget does: "Escalate" (the group fails
	// to its parent) or "Stop" (the group stops and stays stopped).
	OnExhausted string `json:"onExhausted"`
	// Exhausted: the group is stopped because a child spent its budget,
	// or a Shutdown of its restart hung; a start starts it again.
	Exhausted bool `json:"exhausted"`
	// Spent is the most restarts any one of its children has within the
	// window now: the budget is spent once a failure finds it at
	// MaxRestarts.
	Spent int `json:"spent"`
	// ShutdownTimeoutSeconds bounds the Shutdown calls of its restarts and
	// of the stops of its children.
	ShutdownTimeoutSeconds float64 `json:"shutdownTimeoutSeconds"`
	// HealthIntervalSeconds, HealthTimeoutSeconds and UnhealthyThreshold
	// are how its own controllers and webhooks are probed.
	HealthIntervalSeconds float64 `json:"healthIntervalSeconds"`
	HealthTimeoutSeconds  float64 `json:"healthTimeoutSeconds"`
	UnhealthyThreshold    int     `json:"unhealthyThreshold"`
}

// Child returns the child at path at any depth of the tree, as
// supervisor.Status.Child does: "tenant-a/store" is child "store" of
// group "tenant-a".
func (s Status) Child(path string) (Child, bool) {
	return findChild(s.Children, path)
}

func findChild(children []Child, path string) (Child, bool) {
	for _, c := range children {
		if c.Name == path {
			return c, true
		}
		if actors.Kind(c.Kind).IsGroup() && strings.HasPrefix(path, c.Name+"/") {
			return findChild(c.Children, path)
		}
	}
	return Child{}, false
}

// Error is an error as text, and the stacks it carries: that of an
// *actors.PanicError, or those of the children of a
// *supervisor.UnstoppedError, found with errors.As.
type Error struct {
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
}

// Event is a supervisor.Event with its error as text.
type Event struct {
	Type     string    `json:"type"`
	Time     time.Time `json:"time"`
	Child    string    `json:"child,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	Phase    string    `json:"phase"`
	Restarts int       `json:"restarts"`
	Shard    *int      `json:"shard,omitempty"` // ShardAcquired, ShardReleased, ShardLost
	Err      *Error    `json:"error,omitempty"`
}

// Shard is one shard, with sharded leadership.
type Shard struct {
	Index    int      `json:"index"`
	Lease    string   `json:"lease"`
	Holder   string   `json:"holder,omitempty"`
	Held     bool     `json:"held"`
	Children []string `json:"children,omitempty"`
}

// Controls tells the page whether to show its buttons.
type Controls struct {
	Enabled bool `json:"enabled"`
	Token   bool `json:"token"` // a token is required: the page asks for it
}

func newEvent(e supervisor.Event) Event {
	de := Event{Type: string(e.Type), Time: e.Time, Child: e.Child, Kind: e.Kind, Phase: string(e.Phase),
		Restarts: e.Restarts, Err: newError(e.Err)}
	switch e.Type {
	case supervisor.ShardAcquired, supervisor.ShardReleased, supervisor.ShardLost:
		shard := e.Shard
		de.Shard = &shard
	}
	return de
}

func newError(err error) *Error {
	if err == nil {
		return nil
	}
	de := &Error{Message: err.Error()}
	var pe *actors.PanicError
	var ue *supervisor.UnstoppedError
	switch {
	case errors.As(err, &pe):
		de.Stack = string(pe.Stack)
	case errors.As(err, &ue):
		var b strings.Builder
		for _, c := range ue.Children {
			if c.Stack == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(c.String() + ":\n" + c.Stack + "\n")
		}
		de.Stack = b.String()
	}
	return de
}

// newChild converts c and, for a group, its children at every depth,
// each with its recent failures from failures (keyed by path).
func newChild(c supervisor.ChildStatus, failures map[string][]time.Time) Child {
	incarnation := c.Restarts + 1
	if c.State == supervisor.StatePending {
		incarnation = 0
	}
	recent := failures[c.Name]
	if recent == nil {
		recent = []time.Time{}
	}
	out := Child{Name: c.Name, Kind: string(c.Kind), State: string(c.State), Incarnation: incarnation,
		Restarts: c.Restarts, Failures: c.Failures, Healthy: c.Healthy, Message: c.Message,
		LastError: newError(c.LastError), Since: c.Since, RecentFailures: recent}
	if len(c.Children) > 0 {
		out.Children = make([]Child, len(c.Children))
		for i, gc := range c.Children {
			out.Children[i] = newChild(gc, failures)
		}
	}
	if g := c.Group; g != nil {
		onExhausted := "Escalate"
		if g.StopOnExhausted {
			onExhausted = "Stop"
		}
		out.Group = &Group{Strategy: string(g.Strategy), MaxRestarts: g.MaxRestarts,
			RestartWindowSeconds: g.RestartWindow.Seconds(), OnExhausted: onExhausted,
			Exhausted: g.Exhausted, Spent: g.Spent, ShutdownTimeoutSeconds: g.ShutdownTimeout.Seconds(),
			HealthIntervalSeconds: g.HealthInterval.Seconds(), HealthTimeoutSeconds: g.HealthTimeout.Seconds(),
			UnhealthyThreshold: g.UnhealthyThreshold}
	}
	if ci := c.Cluster; ci != nil {
		cl := &Cluster{State: ci.State, Since: ci.Since, ProbeError: ci.ProbeError, Error: ci.Error,
			Problem: ci.Problem, Holder: ci.Holder}
		if !ci.LastProbe.IsZero() {
			probe := ci.LastProbe
			cl.LastProbe = &probe
		}
		if ci.Shard >= 0 {
			shard := ci.Shard
			cl.Shard = &shard
		}
		out.Cluster = cl
	}
	return out
}
