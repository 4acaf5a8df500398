package statespace

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
)

// Group is one group of a tree scenario: a controllermanager.NewGroup at
// Path whose zero fields inherit its parent's supervision.
type Group struct {
	// Path is the group's path: its parent's path, "/", its name ("g1",
	// "g1/g2").
	Path        string
	Strategy    cm.SupervisionStrategy // "": its parent's
	MaxRestarts int32                  // 0: its parent's
	OnExhausted cm.ExhaustedAction     // "": Escalate
	// Children are the names (not paths) of its children in the order
	// added: the scenario's children (store-0, ctrl-1, ...) and its own
	// groups (by their names, g2). The generator puts stores first, so
	// that the order a restart follows (stores first, then as added) is
	// the order added.
	Children []string
	// Sharded marks one of the groups "sg-<i>" that AddShardedGroup adds
	// (trees with 2 to 4 shards): its controllers are pinned to shard
	// Shard, whatever their names hash to. Added by AddShardedGroup after
	// every other child of the root.
	Sharded bool
	Shard   int
	// The group's own health timing (growHealth); zero: its parent's.
	HealthInterval, HealthTimeout time.Duration
	UnhealthyThreshold            int32
}

// spec is the group's SupervisionSpec.
func (g Group) spec() cm.SupervisionSpec {
	return cm.SupervisionSpec{Strategy: g.Strategy, MaxRestarts: g.MaxRestarts, OnExhausted: g.OnExhausted,
		HealthInterval: metav1.Duration{Duration: g.HealthInterval}, HealthTimeout: metav1.Duration{Duration: g.HealthTimeout},
		UnhealthyThreshold: g.UnhealthyThreshold}
}

// Name is the group's name, the last element of its path.
func (g Group) Name() string { return g.Path[strings.LastIndexByte(g.Path, '/')+1:] }

// parentPath returns the path of the group that holds path ("" for the
// root).
func parentPath(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}

// leafName is path's last element.
func leafName(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// within reports whether path is group or inside it, at any depth.
func within(path, group string) bool {
	return path == group || strings.HasPrefix(path, group+"/")
}

// pathOf returns the path of the scenario's initial child (or group) name
// in its tree: the name itself at the root.
func (s Scenario) pathOf(name string) string {
	for _, g := range s.Groups {
		if slices.Contains(g.Children, name) {
			return g.Path + "/" + name
		}
	}
	return name
}

// healthOf is how the child at path is probed: the timing of the nearest
// group above it that sets each value, else the manager's.
func (s Scenario) healthOf(path string) (interval, timeout time.Duration, threshold int32) {
	for p := parentPath(path); p != ""; p = parentPath(p) {
		if g, ok := s.group(p); ok {
			interval = cmp.Or(interval, g.HealthInterval)
			timeout = cmp.Or(timeout, g.HealthTimeout)
			threshold = cmp.Or(threshold, g.UnhealthyThreshold)
		}
	}
	return cmp.Or(interval, HealthInterval), cmp.Or(timeout, HealthTimeout), cmp.Or(threshold, UnhealthyThreshold)
}

// growHealth gives some of a tree scenario's groups a health timing of
// their own: a shorter or a longer interval than the manager's, a
// threshold of 1 or 3, a timeout of their own (so that one tick makes two
// sweeps). The groups of one AddShardedGroup share one spec. Drawn from a
// stream of its own, so that every other draw of a seed is what it was.
func (s *Scenario) growHealth() {
	r := rand.New(rand.NewPCG(s.Seed, 0x4ea17b))
	var sharded *Group
	for i := range s.Groups {
		g := &s.Groups[i]
		if g.Sharded && sharded != nil {
			g.HealthInterval, g.HealthTimeout, g.UnhealthyThreshold = sharded.HealthInterval, sharded.HealthTimeout, sharded.UnhealthyThreshold
			continue
		}
		if r.Float64() < 0.4 {
			g.HealthInterval = []time.Duration{0, HealthInterval / 2, 2 * HealthInterval, 4 * HealthInterval}[r.IntN(4)]
			g.HealthTimeout = []time.Duration{0, 0, 100 * time.Millisecond, 2 * HealthTimeout}[r.IntN(4)]
			g.UnhealthyThreshold = []int32{0, 1, 3}[r.IntN(3)]
		}
		if g.Sharded {
			sharded = g
		}
	}
}

// group returns the group at path.
func (s Scenario) group(path string) (Group, bool) {
	for _, g := range s.Groups {
		if g.Path == path {
			return g, true
		}
	}
	return Group{}, false
}

// rootChildren lists the names of the root's children of a tree
// scenario in the order added: stores (AddStore), controllers, the root's
// groups, webhooks.
func (s Scenario) rootChildren() (stores, others []string) {
	inGroup := map[string]bool{}
	for _, g := range s.Groups {
		for _, c := range g.Children {
			inGroup[c] = true
		}
	}
	st, ctrls, hooks := s.names()
	for _, n := range st {
		if !inGroup[n] {
			stores = append(stores, n)
		}
	}
	for _, n := range ctrls {
		if !inGroup[n] {
			others = append(others, n)
		}
	}
	for _, g := range s.Groups {
		if !strings.Contains(g.Path, "/") && !g.Sharded {
			others = append(others, g.Path)
		}
	}
	for _, n := range hooks {
		if !inGroup[n] {
			others = append(others, n)
		}
	}
	return stores, others
}

// growTree makes s a tree scenario: a few more children, groups nested to
// a depth of 1 to 3 with mixed strategies, budgets and OnExhausted, the
// children spread over them, the steps' children renamed to their paths,
// some lifecycle steps aimed at groups, and crash loops that spend a
// group's budget. Drawn after everything else, so that a flat seed's
// sequence is what it was before trees.
func (s *Scenario) growTree(r *rand.Rand) {
	pick := func(n int) int { return r.IntN(n) }
	chance := func(p float64) bool { return r.Float64() < p }
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo))) }

	s.Stores += pick(2)
	s.Controllers += pick(3)
	depth := 1 + pick(3)
	n := depth + pick(2)
	paths := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("g%d", i+1)
		switch {
		case i == 0:
			paths = append(paths, name)
		case i < depth: // the chain that gives the tree its depth
			paths = append(paths, paths[i-1]+"/"+name)
		default: // another group, at the root or under one not at depth 3
			var parents []string
			for _, p := range paths {
				if strings.Count(p, "/") < 2 {
					parents = append(parents, p)
				}
			}
			if chance(0.4) {
				paths = append(paths, name)
			} else {
				paths = append(paths, parents[pick(len(parents))]+"/"+name)
			}
		}
	}
	strategies := []cm.SupervisionStrategy{"", cm.OneForOne, cm.AllForOne, cm.RestForOne}
	exhausted := []cm.ExhaustedAction{"", cm.ExhaustedEscalate, cm.ExhaustedStop, cm.ExhaustedStop}
	groups := make([]Group, n)
	for i, p := range paths {
		groups[i] = Group{Path: p, Strategy: strategies[pick(len(strategies))], OnExhausted: exhausted[pick(len(exhausted))]}
		if chance(0.7) {
			groups[i].MaxRestarts = int32(1 + pick(3))
		}
	}
	// Spread the children: every group gets one at least, the rest go to
	// a group or stay at the root.
	if have := s.Stores + s.Controllers + s.Webhooks; have < n {
		s.Controllers += n - have
	}
	stores, ctrls, hooks := s.names()
	all := append(append(append([]string(nil), stores...), ctrls...), hooks...)
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	where := map[string]int{} // child → index of its group; absent: the root
	for i, c := range all {
		switch {
		case i < n:
			where[c] = i
		case chance(0.75):
			where[c] = pick(n)
		}
	}
	for i := range groups {
		var gStores, gOthers []string
		for _, c := range append(append(append([]string(nil), stores...), ctrls...), hooks...) {
			if g, ok := where[c]; ok && g == i {
				if strings.HasPrefix(c, "store-") {
					gStores = append(gStores, c)
				} else {
					gOthers = append(gOthers, c)
				}
			}
		}
		for _, sub := range groups {
			if parentPath(sub.Path) == groups[i].Path {
				at := pick(len(gOthers) + 1)
				gOthers = slices.Insert(gOthers, at, sub.Name())
			}
		}
		groups[i].Children = append(gStores, gOthers...)
	}
	s.Groups = groups

	// The steps name paths; some lifecycle steps name a group instead, and
	// added children go into a group, mostly.
	added := map[string]string{} // added-N → its parent's path
	nAdded := 0
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.Do == DoAdd {
			nAdded++
			if chance(0.6) {
				st.Parent = paths[pick(n)]
			}
			added[fmt.Sprintf("added-%d", nAdded)] = st.Parent
		}
		if st.Child == "" {
			continue
		}
		if p, ok := added[st.Child]; ok {
			if p != "" {
				st.Child = p + "/" + st.Child
			}
		} else {
			st.Child = s.pathOf(st.Child)
		}
		switch st.Do {
		case DoRestart, DoStop, DoStartChild:
			if chance(0.3) {
				st.Child = paths[pick(n)]
			}
		}
	}
	// Crash loops inside groups: a child whose start calls fail from now
	// on, made to fail, spends its group's budget; the group then stops or
	// fails to its parent. Sometimes it is calmed and its group started
	// again.
	first := slices.IndexFunc(s.Steps, func(st Step) bool { return st.Do == DoStart })
	for range 1 + pick(2) {
		var inGroups []string
		for _, c := range all {
			if _, ok := where[c]; ok {
				inGroups = append(inGroups, s.pathOf(c))
			}
		}
		victim := inGroups[pick(len(inGroups))]
		loop := []Step{
			{At: cm.PhaseRunning, Do: DoKnobs, Child: victim, Knobs: Knobs{StartFails: true}},
			{Do: DoFail, Child: victim},
			{Do: DoWait, Dur: between(100*time.Millisecond, 400*time.Millisecond)},
		}
		if chance(0.4) {
			loop = append(loop, Step{Do: DoKnobs, Child: victim, Knobs: Knobs{}},
				Step{Do: DoStartChild, Child: parentPath(victim)},
				Step{Do: DoWait, Dur: between(20*time.Millisecond, 150*time.Millisecond)})
		}
		at := first + 1 + pick(len(s.Steps)-first)
		s.Steps = slices.Insert(s.Steps, at, loop...)
	}
}

// shardOf returns the shard whose Lease fences the controller at path: its
// sharded group's (AddShardedGroup pins every controller in it, added
// ones too), else cm.ShardOf(path, Shards).
func (s Scenario) shardOf(path string) int {
	if m := fleetMember(path); m != "" {
		return cm.ShardOf(m, s.Shards) // a member's subtree runs under its cluster's shard
	}
	for p := path; p != ""; p = parentPath(p) {
		if g, ok := s.group(p); ok && g.Sharded {
			return g.Shard
		}
	}
	return cm.ShardOf(path, s.Shards)
}

// HasShardedGroups reports whether s adds the groups of an
// AddShardedGroup (growShardedGroups).
func HasShardedGroups(s Scenario) bool {
	return slices.ContainsFunc(s.Groups, func(g Group) bool { return g.Sharded })
}

// growShardedGroups adds, to a tree scenario with 2 to 4 shards, the
// groups of one AddShardedGroup ("sg-<i>", one per shard, each a store
// sometimes and one or two controllers, the spec drawn as a group's), and
// lifecycle steps aimed at them and at their children: restarts, stops,
// starts, removals, failures and AddChild into them, which cross the
// sequence's re-elections, Steals and partitions. Drawn from a stream of
// its own, so that the rest of a seed's sequence is what it was before
// (the regression table replays seeds).
func (s *Scenario) growShardedGroups() {
	if len(s.Groups) == 0 || s.Shards < 2 || s.Shards > 4 {
		return
	}
	r := rand.New(rand.NewPCG(s.Seed, 0x5ba2d6e0c0ffee))
	pick := func(n int) int { return r.IntN(n) }
	chance := func(p float64) bool { return r.Float64() < p }
	if !chance(0.6) {
		return
	}
	strategies := []cm.SupervisionStrategy{"", cm.OneForOne, cm.AllForOne, cm.RestForOne}
	exhausted := []cm.ExhaustedAction{"", cm.ExhaustedEscalate, cm.ExhaustedStop, cm.ExhaustedStop}
	spec := Group{Strategy: strategies[pick(len(strategies))], OnExhausted: exhausted[pick(len(exhausted))]}
	if chance(0.7) {
		spec.MaxRestarts = int32(1 + pick(3))
	}
	withStore, ctrls := chance(0.3), 1+pick(2)
	var groups, members []string
	for i := range s.Shards {
		g := spec
		g.Path, g.Sharded, g.Shard = fmt.Sprintf("sg-%d", i), true, i
		if withStore {
			g.Children = append(g.Children, fmt.Sprintf("store-sg%d", i))
		}
		for k := range ctrls {
			g.Children = append(g.Children, fmt.Sprintf("ctrl-sg%d%c", i, 'a'+k))
		}
		for _, c := range g.Children {
			members = append(members, g.Path+"/"+c)
		}
		groups = append(groups, g.Path)
		s.Groups = append(s.Groups, g)
	}
	first := slices.IndexFunc(s.Steps, func(st Step) bool { return st.Do == DoStart })
	if first < 0 {
		return
	}
	for range 2 + pick(4) {
		var st Step
		switch x := pick(6); x {
		case 0, 1, 2, 3:
			st.Do = []Action{DoRestart, DoStop, DoStartChild, DoRemove}[x]
			if chance(0.4) {
				st.Child = groups[pick(len(groups))]
			} else {
				st.Child = members[pick(len(members))]
			}
		case 4:
			st = Step{Do: DoAdd, Kind: "controller", Parent: groups[pick(len(groups))]}
		default:
			st = Step{Do: DoFail, Child: members[pick(len(members))]}
		}
		if st.Do == DoRemove && chance(0.5) {
			st.Do = DoRestart // removals end a member for good: fewer of them
		}
		at := first + 1 + pick(len(s.Steps)-first)
		s.Steps = slices.Insert(s.Steps, at, st, Step{Do: DoWait, Dur: time.Duration(20+pick(200)) * time.Millisecond})
	}
}

func (g Group) String() string {
	strategy := string(g.Strategy)
	if strategy == "" {
		strategy = "inherited strategy"
	}
	budget := "inherited budget"
	if g.MaxRestarts > 0 {
		budget = fmt.Sprintf("%d restarts", g.MaxRestarts)
	}
	onExhausted := g.OnExhausted
	if onExhausted == "" {
		onExhausted = cm.ExhaustedEscalate
	}
	sharded := ""
	if g.Sharded {
		sharded = fmt.Sprintf(", AddShardedGroup, shard %d", g.Shard)
	}
	health := ""
	if g.HealthInterval > 0 || g.HealthTimeout > 0 || g.UnhealthyThreshold > 0 {
		health = fmt.Sprintf(", health every %s within %s, threshold %d", g.HealthInterval, g.HealthTimeout, g.UnhealthyThreshold)
	}
	return fmt.Sprintf("%s (%s, %s, %s%s%s): %s", g.Path, strategy, budget, onExhausted, sharded, health, strings.Join(g.Children, ", "))
}
