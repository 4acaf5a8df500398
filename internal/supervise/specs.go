package supervise

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// Facade plumbing: Specs classifies and names what was added to a manager
// in mode, in order, and validates the result, reporting every problem at
// once (StartManager's Children and Err). A value with a Name method is
// named by it, a controller without one by GetHealth().Name, off the
// caller's goroutine and bounded by nameTimeout (the manager's
// HealthTimeout): childactor.NamesOf, childactor.ResolveNames.
//
// An actors.Spec among added is taken as given (a controller the facade
// named and pinned itself); an Invalid is reported as that child's problem.
func Specs(mode Mode, added []any, nameTimeout time.Duration) ([]childactor.Spec, error) {
	specs := make([]childactor.Spec, len(added))
	errs := make([]error, len(added))
	var byName []int                     // values with a Name method
	var byHealth []int                   // controllers named by GetHealth().Name
	parent := make([]string, len(added)) // the group an InGroup or a GroupDecl is in
	added = slices.Clone(added)
	for i, v := range added {
		switch given := v.(type) {
		case childactor.Spec: // named and classified by the facade already, at the root
			specs[i] = given
			errs[i] = CheckName(given.Name, given.Kind, "")
			continue
		case Invalid:
			errs[i] = given.Err
			continue
		case GroupDecl:
			if given.Err != nil {
				errs[i] = given.Err
				continue
			}
			decl := given
			specs[i], parent[i] = childactor.Spec{Name: given.Name, Kind: cmp.Or(given.Kind, actors.KindGroup), Impl: &decl}, given.Parent
			continue
		case InGroup:
			parent[i] = given.Parent
			v = given.Value
			added[i] = v
		}
		spec, err := classify(mode, v)
		if err != nil {
			errs[i] = err
			continue
		}
		specs[i] = spec
		switch _, hasName := v.(actors.Namer); {
		case hasName:
			byName = append(byName, i)
		case spec.Kind == actors.KindController:
			// A controller's name is GetHealth().Name: user code that may
			// block on I/O, each call in a goroutine of its own.
			byHealth = append(byHealth, i)
		case spec.Kind == actors.KindRunnable:
			specs[i].Name = fmt.Sprintf("runnable-%d", i) // nothing to call
		}
	}
	// Name() is user code too, a getter that should not block but may:
	// named off this goroutine, within nameTimeout, as AddChild names.
	resolve := func(at []int, names func([]any, time.Duration) ([]string, []error)) {
		if len(at) == 0 {
			return
		}
		vals := make([]any, len(at))
		for j, i := range at {
			vals[j] = added[i]
		}
		got, nerrs := names(vals, nameTimeout)
		for j, i := range at {
			specs[i].Name, errs[i] = got[j], nerrs[j]
			if errs[i] == nil && specs[i].Name == "" && specs[i].Kind == actors.KindRunnable {
				specs[i].Name = fmt.Sprintf("runnable-%d", i)
			}
		}
	}
	resolve(byName, childactor.NamesOf)
	resolve(byHealth, childactor.ResolveNames)
	for i := range specs {
		if errs[i] != nil {
			continue
		}
		if errs[i] = CheckName(specs[i].Name, specs[i].Kind, parent[i]); errs[i] != nil {
			continue
		}
		if parent[i] != "" {
			specs[i].Name = parent[i] + "/" + specs[i].Name
			specs[i].Group = parent[i]
		}
	}
	if err := validateSpecs(specs, errs); err != nil {
		return nil, err
	}
	return specs, nil
}

// Facade plumbing: Invalid, among the values given to Specs, is a child the
// facade could not even build; Err says why, and Specs reports it by the
// child's position.
type Invalid struct{ Err error }

// Facade plumbing: GroupDecl, among the values given to Specs, declares a
// group (controllermanager.NewGroup) named Name in the group at Parent;
// its path is made as a child's is; the values that follow it wrapped in
// an InGroup naming that path are its children. Its Policy's and its
// backoff's zero fields inherit the parent's.
type GroupDecl struct {
	Name string
	// Kind is the group's kind (Kind.IsGroup): KindGroup, or KindCluster
	// for a fleet's member cluster; zero is KindGroup.
	Kind actors.Kind
	// Parent is the path of the group it is in, "" at the root.
	Parent         string
	Policy         Policy
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// StopOnExhausted: when its budget is spent the group stops and stays
	// stopped, instead of failing to its parent.
	StopOnExhausted bool
	// ShutdownTimeout bounds the Shutdown calls of the stops the group's
	// level makes or is asked for (level.stopContext); zero inherits the
	// parent level's.
	ShutdownTimeout time.Duration
	// HealthInterval, HealthTimeout and UnhealthyThreshold are how the
	// group's own hosted children are probed (level.probeTiming); zero inherits
	// the parent level's.
	HealthInterval, HealthTimeout time.Duration
	UnhealthyThreshold            int
	// Shard, when positive, pins every controller under the group, at any
	// depth and whenever added (at Start or by AddChild), to shard Shard-1:
	// a group of AddShardedGroup. A group inside it inherits it.
	Shard int
	// Err, when set, is why the group could not be built (Specs reports it
	// by its position).
	Err error
	// Hook, when set, is the group's TreeHook: told what the tree did with
	// the group, as a hosted child's Impl is (a fleet's member cluster's
	// group, which refuses an add of a config no longer wanted).
	Hook TreeHook
}

// Facade plumbing: InGroup, among the values given to Specs, is Value, a
// child of the group at path Parent: its name becomes Parent + "/" + name.
type InGroup struct {
	Parent string
	Value  any
	// Shard, when positive, pins Value (a controller) to shard Shard-1: it
	// is in a group of AddShardedGroup. The facade reads it; Specs does not.
	Shard int
}
