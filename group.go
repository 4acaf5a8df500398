package controllermanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/supervise"
)

// Group is a child that supervises children of its own (NewGroup): a
// supervision tree's inner node. It goes wherever a child goes (Add,
// inside another group) and is a Runnable only so that it does: the
// manager never calls its Shutdown, it shuts its children down.
type Group struct {
	name     string
	spec     SupervisionSpec
	children []Runnable
	shard    int // AddShardedGroup's shard + 1: its controllers are pinned to it; 0: none
	// kind is what its record, its events and its status say it is:
	// KindGroup, or KindCluster for a fleet's member cluster.
	kind actors.Kind
	// hook is told what the tree did with the group (a fleet's member
	// cluster's: refuses an add of a replaced config); nil: none.
	hook supervise.TreeHook
}

// NewGroup returns a group named name (unique among its siblings; an
// empty or blank name, or one holding a "/", makes Start or AddChild fail
// with an error wrapping ErrInvalidName) that supervises children with spec's strategy, restart budget
// and backoff; each zero field inherits the parent's (the manager's for a
// group added to the manager). spec's OnExhausted says what the group does
// once a child has spent its budget. spec's ShutdownTimeout (zero: the
// parent's) bounds the Shutdown calls of the group's own restarts, a
// restart whose Shutdown has not returned by then escalating as the
// manager's does (or stopping the nearest group whose OnExhausted is
// Stop, this one or one above it), and of StopChild, RemoveChild and RestartChild of a
// child of the group; the manager's shutdown, a lost lease and a shard
// move keep the manager's. spec's HealthInterval, HealthTimeout and
// UnhealthyThreshold (zero: the parent's) are how the group's own
// controllers and webhooks are probed.
//
// Inside the group the root's rules hold: at start its stores recover
// first, then its other children start, each phase in parallel; a stop
// shuts its children down together; a restart starts the children it names
// again one after another in the order they were added, stores first.
// Unlike the root's, a group's strategy names its stores too. A child's
// name in a group is its path, "tenant-a/store".
func NewGroup(name string, spec SupervisionSpec, children ...Runnable) *Group {
	return &Group{name: name, spec: spec, children: children}
}

// StoreChild makes s a child a group can hold (NewGroup takes Runnables,
// and a Store needs no Shutdown): the manager recovers it as a store, and
// its Shutdown calls s's when s has one, and does nothing otherwise.
// StoreChild(nil) makes Start or AddChild fail with an error saying so, as
// a nil *Group or *Fleet does.
func StoreChild(s Store) Runnable {
	if r, ok := s.(Runnable); ok {
		return r
	}
	return storeChild{s}
}

// storeChild is a Store without a Shutdown of its own, as a Runnable.
type storeChild struct{ Store }

// Shutdown does nothing: the store has nothing to stop.
func (storeChild) Shutdown(context.Context) {}

// Name is the group's name.
func (g *Group) Name() string { return g.name }

// Shutdown does nothing: the manager shuts a group's children down itself.
func (g *Group) Shutdown(context.Context) {}

// flattenGroups replaces every Group among vals by its declaration and its
// children (each wrapped in supervise.InGroup), depth first, for
// supervise.Specs.
func flattenGroups(vals []any) []any { return flattenGroupsAt("", vals) }

// groupTree is supervise.Config.Tree: v's values for supervise.Specs at
// path parent when v is a Group.
func groupTree(parent string, v any) ([]any, bool) {
	if err := nilChild(parent, v); err != nil {
		return []any{supervise.Invalid{Err: err}}, true
	}
	g, ok := fleetGroup(v).(*Group)
	if !ok || g == nil {
		return nil, false
	}
	return flattenGroupsAt(parent, []any{g}), true
}

// flattenGroupsAt is flattenGroups for values added under the group at
// path parent (empty: the root).
func flattenGroupsAt(parent string, vals []any) []any {
	has := false
	for _, v := range vals {
		switch v.(type) {
		case *Group, *Fleet, storeChild:
			has = true
		}
	}
	if !has && parent == "" {
		return vals
	}
	out := make([]any, 0, len(vals))
	var walk func(parent string, shard int, v any)
	walk = func(parent string, shard int, v any) {
		if err := nilChild(parent, v); err != nil {
			out = append(out, supervise.Invalid{Err: err})
			return
		}
		v = fleetGroup(v) // a Fleet goes where a Group goes
		g, ok := v.(*Group)
		if !ok || g == nil {
			if parent != "" {
				v = supervise.InGroup{Parent: parent, Value: v, Shard: shard}
			}
			out = append(out, v)
			return
		}
		if g.shard > 0 {
			shard = g.shard
		}
		path := g.name
		if parent != "" {
			path = parent + "/" + g.name
		}
		decl := g.decl(parent, path)
		decl.Shard = shard
		out = append(out, decl)
		if decl.Err != nil {
			return
		}
		for _, c := range g.children {
			var cv any
			if c != nil {
				cv = c
			}
			walk(path, shard, cv)
		}
	}
	for _, v := range vals {
		walk(parent, 0, v)
	}
	return out
}

// nilChild says why v, a child added in the group at path parent ("" for
// the root), is one of the manager's own children holding nil: a nil *Group
// or *Fleet, or StoreChild(nil), whose Name would dereference nil. It is
// nil for any other v.
func nilChild(parent string, v any) error {
	var err error
	switch x := v.(type) {
	case *Group:
		if x == nil {
			err = errors.New("a nil *Group: make a group with NewGroup")
		}
	case *Fleet:
		if x == nil {
			err = errors.New("a nil *Fleet: make a fleet with NewFleet")
		}
	case storeChild:
		if x.Store == nil {
			err = errors.New("StoreChild(nil): the Store is nil")
		}
	}
	if err != nil && parent != "" {
		err = fmt.Errorf("group %q: %w", parent, err)
	}
	return err
}

// decl is g's declaration at path, in the group at path parent ("" for
// the root), its name and spec validated.
func (g *Group) decl(parent, path string) supervise.GroupDecl {
	d := supervise.GroupDecl{Name: g.name, Parent: parent, Kind: cmp.Or(g.kind, actors.KindGroup), Hook: g.hook}
	var errs []error
	if err := supervise.CheckName(g.name, d.Kind, parent); err != nil {
		errs = append(errs, err)
	}
	spec := g.spec
	checked := spec // the backoffs are checked against each other once inherited
	checked.InitialBackoff, checked.MaxBackoff = metav1.Duration{}, metav1.Duration{}
	if _, err := checked.supervision(); err != nil {
		errs = append(errs, err)
	}
	if spec.InitialBackoff.Duration < 0 || spec.MaxBackoff.Duration < 0 {
		errs = append(errs, errors.New("supervision: initialBackoff and maxBackoff must not be negative"))
	} else if spec.MaxBackoff.Duration > 0 && spec.InitialBackoff.Duration > spec.MaxBackoff.Duration {
		errs = append(errs, fmt.Errorf("supervision.initialBackoff: %s exceeds supervision.maxBackoff %s", spec.InitialBackoff.Duration, spec.MaxBackoff.Duration))
	}
	switch spec.OnExhausted {
	case "", ExhaustedEscalate:
	case ExhaustedStop:
		d.StopOnExhausted = true
	default:
		errs = append(errs, fmt.Errorf("supervision.onExhausted: %q is not one of Escalate, Stop", spec.OnExhausted))
	}
	d.Policy = supervise.Policy{Strategy: spec.Strategy, MaxRestarts: int(spec.MaxRestarts), RestartWindow: spec.RestartWindow.Duration}
	d.InitialBackoff, d.MaxBackoff = spec.InitialBackoff.Duration, spec.MaxBackoff.Duration
	d.ShutdownTimeout = spec.ShutdownTimeout.Duration
	d.HealthInterval, d.HealthTimeout = spec.HealthInterval.Duration, spec.HealthTimeout.Duration
	d.UnhealthyThreshold = int(spec.UnhealthyThreshold)
	if err := errors.Join(errs...); err != nil {
		d.Err = fmt.Errorf("%s %q: %w", d.Kind, path, err)
	}
	return d
}
