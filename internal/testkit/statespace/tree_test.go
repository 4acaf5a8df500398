package statespace

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
)

// The generator's trees, without running them: a seed replays, and every
// tree it draws is one the manager takes and the steps can name.
func TestGenerateTrees(t *testing.T) {
	const seeds = 2000
	trees := 0
	depths := map[int]int{}
	strategies := map[cm.SupervisionStrategy]int{}
	onExhausted := map[cm.ExhaustedAction]int{}
	sharded := 0 // groups of AddShardedGroup
	for seed := uint64(1); seed <= seeds; seed++ {
		s := Generate(seed)
		if !reflect.DeepEqual(s, Generate(seed)) {
			t.Fatalf("seed %d: two scenarios from one seed", seed)
		}
		if len(s.Groups) == 0 {
			continue
		}
		trees++
		stores, ctrls, hooks := s.names()
		initial := append(append(append([]string(nil), stores...), ctrls...), hooks...)
		known := map[string]bool{}
		depth := 0
		plain := 0 // groups but AddShardedGroup's
		for _, g := range s.Groups {
			if g.Sharded {
				// AddShardedGroup's: one per shard, at the root, children of
				// their own, drawn only with 2 to 4 shards.
				sharded++
				if s.Shards < 2 || s.Shards > 4 || g.Shard < 0 || g.Shard >= s.Shards || g.Path != fmt.Sprintf("sg-%d", g.Shard) || len(g.Children) == 0 {
					t.Errorf("seed %d: sharded group %s (shard %d of %d) with children %v", seed, g.Path, g.Shard, s.Shards, g.Children)
				}
				known[g.Path] = true
				for _, c := range g.Children {
					known[g.Path+"/"+c] = true
				}
				continue
			}
			plain++
			depth = max(depth, strings.Count(g.Path, "/")+1)
			strategies[g.Strategy]++
			onExhausted[g.OnExhausted]++
			if p := parentPath(g.Path); p != "" {
				if _, ok := s.group(p); !ok {
					t.Errorf("seed %d: group %s before (or without) its parent", seed, g.Path)
				}
			}
			if len(g.Children) == 0 {
				t.Errorf("seed %d: group %s is empty", seed, g.Path)
			}
			// Stores first: the order added is the order a restart follows.
			for i, c := range g.Children {
				if i > 0 && strings.HasPrefix(c, "store-") && !strings.HasPrefix(g.Children[i-1], "store-") {
					t.Errorf("seed %d: group %s: store %s after another child: %v", seed, g.Path, c, g.Children)
				}
				if slices.Contains(g.Children[:i], c) {
					t.Errorf("seed %d: group %s holds %s twice", seed, g.Path, c)
				}
			}
			known[g.Path] = true
		}
		depths[depth]++
		placed := 0
		for _, name := range initial {
			path := s.pathOf(name)
			known[path] = true
			if path != name {
				placed++
			}
		}
		if placed < plain {
			t.Errorf("seed %d: %d children in %d groups", seed, placed, plain)
		}
		stores, others := s.rootChildren()
		if n := len(stores) + len(others) + placed - countRootGroups(s); n != len(initial) {
			t.Errorf("seed %d: %d children at the root and in groups, want %d", seed, n, len(initial))
		}
		added := 0
		for _, st := range s.Steps {
			if st.Do == DoAdd {
				added++
				name := fmt.Sprintf("added-%d", added)
				if st.Parent != "" {
					name = st.Parent + "/" + name
				}
				known[name] = true
			}
			if st.Child != "" && !known[st.Child] {
				t.Errorf("seed %d: step %q names %s, no child or group the sequence has by then", seed, st, st.Child)
			}
		}
	}
	// About 45% of the seeds; every depth, strategy and OnExhausted drawn.
	if trees < seeds/3 || trees > seeds*3/5 {
		t.Errorf("%d trees in %d seeds", trees, seeds)
	}
	for _, d := range []int{1, 2, 3} {
		if depths[d] == 0 {
			t.Errorf("no tree of depth %d: %v", d, depths)
		}
	}
	if len(depths) != 3 {
		t.Errorf("depths %v, want 1 to 3", depths)
	}
	for _, st := range []cm.SupervisionStrategy{"", cm.OneForOne, cm.AllForOne, cm.RestForOne} {
		if strategies[st] == 0 {
			t.Errorf("no group with strategy %q: %v", st, strategies)
		}
	}
	for _, a := range []cm.ExhaustedAction{"", cm.ExhaustedEscalate, cm.ExhaustedStop} {
		if onExhausted[a] == 0 {
			t.Errorf("no group with OnExhausted %q: %v", a, onExhausted)
		}
	}
	if sharded == 0 {
		t.Errorf("no group of AddShardedGroup in %d seeds", seeds)
	}
	t.Logf("%d trees in %d seeds; depths %v; strategies %v; OnExhausted %v; %d groups of AddShardedGroup", trees, seeds, depths, strategies, onExhausted, sharded)
}

func countRootGroups(s Scenario) int {
	n := 0
	for _, g := range s.Groups {
		if !strings.Contains(g.Path, "/") && !g.Sharded {
			n++
		}
	}
	return n
}

// The tree is drawn after everything else: a seed's flat draw (its
// make-up, its actions, in order) is what it was before trees, so a seed
// reported before trees replays.
func TestGenerateTreeKeepsTheFlatDraw(t *testing.T) {
	for seed := uint64(1); seed <= 500; seed++ {
		flat, s := generate(seed, false), Generate(seed)
		if len(s.Groups) == 0 {
			if !reflect.DeepEqual(flat, s) {
				t.Fatalf("seed %d: without a tree\n%s\nwant\n%s", seed, s, flat)
			}
			continue
		}
		tree := s
		tree.Groups, tree.Steps = nil, nil
		tree.Stores, tree.Controllers = flat.Stores, flat.Controllers
		flatMakeUp := flat
		flatMakeUp.Steps = nil
		if !reflect.DeepEqual(tree, flatMakeUp) {
			t.Errorf("seed %d: the tree changed the make-up:\n%s\nwant\n%s", seed, tree, flatMakeUp)
		}
		if s.Stores < flat.Stores || s.Controllers < flat.Controllers {
			t.Errorf("seed %d: the tree took children away", seed)
		}
		// The flat steps, in order, among the tree's (which adds crash loops):
		// the same actions, each child renamed to its path.
		j := 0
		for _, st := range s.Steps {
			if j < len(flat.Steps) && sameStep(flat.Steps[j], st) {
				j++
			}
		}
		if j != len(flat.Steps) {
			t.Errorf("seed %d: flat step %d (%s) is not among the tree's steps in order:\n%s", seed, j+1, flat.Steps[j], s)
		}
	}
}

// sameStep reports whether tree's step is flat's with its child renamed
// (to its path, or to a group for a lifecycle step) and its parent set.
func sameStep(flat, tree Step) bool {
	if flat.Child != "" && tree.Child != "" && leafName(tree.Child) != flat.Child && (tree.Do == DoFail || tree.Do == DoKnobs || tree.Do == DoRemove) {
		return false
	}
	flat.Child, tree.Child, tree.Parent = "", "", ""
	return reflect.DeepEqual(flat, tree)
}

// WithLeaseEdits adds only its edits (and their waits), after the Start,
// the same ones for a seed, and nothing without an elector.
func TestWithLeaseEdits(t *testing.T) {
	forElectedSeeds(t, WithLeaseEdits, func(seed uint64, s, e Scenario) []Step {
		start := slices.IndexFunc(e.Steps, func(st Step) bool { return st.Do == DoStart })
		var rest []Step
		edits := 0
		for i := 0; i < len(e.Steps); i++ {
			switch st := e.Steps[i]; st.Do {
			case DoAnnotateLease, DoUnlabelLease, DoDeleteLease:
				edits++
				if i < start {
					t.Fatalf("seed %d: an edit before Start", seed)
				}
				if s.Shards <= 1 && st.Shard != 0 || s.Shards > 1 && st.Shard >= s.Shards {
					t.Fatalf("seed %d: edit of shard %d of %d", seed, st.Shard, s.Shards)
				}
				if i+1 == len(e.Steps) || e.Steps[i+1].Do != DoWait {
					t.Fatalf("seed %d: an edit without its wait", seed)
				}
				i++ // its wait
			default:
				rest = append(rest, st)
			}
		}
		if edits < 1 || edits > 3 {
			t.Fatalf("seed %d: %d edits", seed, edits)
		}
		return rest
	})
}

// forElectedSeeds runs check on the first 500 seeds' scenarios s with an
// elector and with(s), e, once it has checked that with gives the same e
// for a seed, and returns s itself without an elector; check returns e's
// steps but those with added, which must be s's.
func forElectedSeeds(t *testing.T, with func(Scenario) Scenario, check func(seed uint64, s, e Scenario) []Step) {
	t.Helper()
	elected := 0
	for seed := uint64(1); seed <= 500; seed++ {
		s := Generate(seed)
		e := with(s)
		if !reflect.DeepEqual(e, with(Generate(seed))) {
			t.Fatalf("seed %d: two scenarios from one seed", seed)
		}
		if s.Election == ElectionOff {
			if !reflect.DeepEqual(e, s) {
				t.Fatalf("seed %d: steps added without an elector", seed)
			}
			continue
		}
		elected++
		if rest := check(seed, s, e); !reflect.DeepEqual(rest, s.Steps) {
			t.Fatalf("seed %d: the other steps changed:\n%v\n%v", seed, rest, s.Steps)
		}
	}
	if elected < 250 {
		t.Fatalf("only %d of 500 seeds have an elector", elected)
	}
}

// WithStalledWatches adds only its stalls (a stall of the watches, a hang
// of the lists or both, each alone, or with its wait and what ends it),
// after the Start, the same ones for a seed, and nothing without an
// elector.
func TestWithStalledWatches(t *testing.T) {
	ends := map[Action]Action{DoResumeWatch: DoStallWatch, DoAnswerList: DoHangList}
	var watches, lists int
	forElectedSeeds(t, WithStalledWatches, func(seed uint64, s, e Scenario) []Step {
		start := slices.IndexFunc(e.Steps, func(st Step) bool { return st.Do == DoStart })
		var rest []Step
		begun := map[Action]int{}
		for i, st := range e.Steps {
			switch st.Do {
			case DoStallWatch, DoHangList:
				if i < start {
					t.Fatalf("seed %d: %s before Start", seed, st.Do)
				}
				begun[st.Do]++
			case DoResumeWatch, DoAnswerList:
				if begun[ends[st.Do]] == 0 {
					t.Fatalf("seed %d: %s without %s before it", seed, st.Do, ends[st.Do])
				}
			case DoWait:
				if next := i + 1; next < len(e.Steps) && ends[e.Steps[next].Do] != "" {
					if st.Dur < LeaseDuration || st.Dur > 3*LeaseDuration {
						t.Fatalf("seed %d: a stall of %s", seed, st.Dur)
					}
					continue // the stall's wait
				}
				rest = append(rest, st)
			default:
				rest = append(rest, st)
			}
		}
		if n := begun[DoStallWatch] + begun[DoHangList]; n < 1 || n > 4 {
			t.Fatalf("seed %d: %d stalls and hangs", seed, n)
		}
		watches += begun[DoStallWatch]
		lists += begun[DoHangList]
		return rest
	})
	if watches == 0 || lists == 0 {
		t.Fatalf("%d stalled watches and %d hung lists drawn: want both", watches, lists)
	}
}

// Some groups of a tree have a health timing of their own, drawn from a
// stream of their own: with the timings taken out, the scenario is what
// it was without them. A child is probed at the timing of the nearest
// group above it that sets each value (healthOf), the sharded groups of
// one AddShardedGroup share one.
func TestGenerateGroupHealth(t *testing.T) {
	own, groups, shortest := 0, 0, 0
	for seed := uint64(1); seed <= 2000; seed++ {
		s := Generate(seed)
		var sharded *Group // the first of AddShardedGroup's, as drawn
		for i, g := range s.Groups {
			groups++
			if g.HealthInterval > 0 || g.HealthTimeout > 0 || g.UnhealthyThreshold > 0 {
				own++
			}
			if g.HealthInterval > 0 && g.HealthInterval < HealthInterval {
				shortest++
			}
			if g.Sharded {
				if sharded != nil && (g.HealthInterval != sharded.HealthInterval || g.HealthTimeout != sharded.HealthTimeout || g.UnhealthyThreshold != sharded.UnhealthyThreshold) {
					t.Errorf("seed %d: sharded groups %s and %s differ in health timing", seed, sharded.Path, g.Path)
				}
				if sharded == nil {
					sharded = &g
				}
			}
			s.Groups[i].HealthInterval, s.Groups[i].HealthTimeout, s.Groups[i].UnhealthyThreshold = 0, 0, 0
		}
		without := Generate(seed)
		for i := range without.Groups {
			without.Groups[i].HealthInterval, without.Groups[i].HealthTimeout, without.Groups[i].UnhealthyThreshold = 0, 0, 0
		}
		if !reflect.DeepEqual(s, without) {
			t.Fatalf("seed %d: the health draw changed the scenario", seed)
		}
	}
	if own < groups/4 || own > groups/2 || shortest == 0 {
		t.Errorf("%d of %d groups with a health timing of their own, %d shorter than the manager's", own, groups, shortest)
	}

	s := Scenario{Groups: []Group{
		{Path: "a", HealthInterval: 100 * time.Millisecond, UnhealthyThreshold: 1},
		{Path: "a/b", HealthTimeout: time.Second},
		{Path: "a/b/c"},
	}}
	for _, c := range []struct {
		path      string
		interval  time.Duration
		timeout   time.Duration
		threshold int32
	}{
		{"ctrl-0", HealthInterval, HealthTimeout, UnhealthyThreshold},
		{"a/ctrl-0", 100 * time.Millisecond, HealthTimeout, 1},
		{"a/b/c/ctrl-0", 100 * time.Millisecond, time.Second, 1},
	} {
		interval, timeout, threshold := s.healthOf(c.path)
		if interval != c.interval || timeout != c.timeout || threshold != c.threshold {
			t.Errorf("healthOf(%s) = %s, %s, %d; want %s, %s, %d", c.path, interval, timeout, threshold, c.interval, c.timeout, c.threshold)
		}
	}
}
