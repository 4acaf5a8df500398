package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cluster simulates replicas applying Assign to the Leases they share: each
// round, every member gives up the shards assigned to another, shards of
// departed holders expire, and then every member takes the free shards
// assigned to it.
type cluster struct {
	shards  int
	members []string
	holders []string
	rng     *rand.Rand
}

// converge applies the rule one action at a time, as replicas do, each
// seeing the others' last action: a random one of the possible actions
// (a holder gives up a shard assigned to another, an expired shard of a
// departed holder is freed, a member takes a free shard assigned to it),
// until none is left. It returns how many shards changed hands, by new
// holder.
func (c *cluster) converge(t *testing.T) map[string]int {
	t.Helper()
	if c.rng == nil {
		c.rng = rand.New(rand.NewPCG(uint64(c.shards), uint64(len(c.members))))
	}
	moved := map[string]int{}
	last := slices.Clone(c.holders)
	for step := 0; ; step++ {
		require.Less(t, step, 10*c.shards+10, "no fixpoint: %v", c.holders)
		a := Assign(c.shards, c.members, c.holders)
		var actions []func()
		for s, h := range c.holders {
			switch {
			case h != "" && (h != a[s] || !slices.Contains(c.members, h)):
				actions = append(actions, func() { c.holders[s] = "" })
			case h == "":
				actions = append(actions, func() { c.holders[s] = a[s] })
			}
		}
		if len(actions) == 0 {
			break
		}
		actions[c.rng.IntN(len(actions))]()
	}
	for s, h := range c.holders {
		if h != last[s] {
			moved[h]++
		}
	}
	return moved
}

func (c *cluster) counts() map[string]int {
	n := map[string]int{}
	for _, h := range c.holders {
		n[h]++
	}
	return n
}

// balanced checks that every member holds ⌊S/R⌋ or ⌈S/R⌉ shards and that
// every shard is held by a member.
func (c *cluster) balanced(t *testing.T, what string) {
	t.Helper()
	n := c.counts()
	lo, hi := c.shards/len(c.members), (c.shards+len(c.members)-1)/len(c.members)
	for _, m := range c.members {
		assert.True(t, n[m] >= lo && n[m] <= hi, "%s: %s holds %d, want %d..%d (%v)", what, m, n[m], lo, hi, c.holders)
	}
	for s, h := range c.holders {
		assert.True(t, slices.Contains(c.members, h), "%s: shard %d held by %q", what, s, h)
	}
}

func (c *cluster) clone() *cluster {
	return &cluster{shards: c.shards, members: slices.Clone(c.members), holders: slices.Clone(c.holders), rng: c.rng}
}

func ids(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestAssignJoinsAndLeaves checks, for 1…5 replicas and 1, 4, 12, 32
// shards, from every stable state reached by the rule: balance; a leave (of
// each member in turn) moves only the leaver's shards; a join moves shards
// only to the joiner, at most ⌈S/R⌉.
func TestAssignJoinsAndLeaves(t *testing.T) {
	for _, shards := range []int{1, 4, 12, 32} {
		for replicas := 1; replicas <= 5; replicas++ {
			t.Run(fmt.Sprintf("S=%d/R=%d", shards, replicas), func(t *testing.T) {
				c := &cluster{shards: shards, members: ids("replica", replicas), holders: make([]string, shards)}
				c.converge(t)
				c.balanced(t, "start")
				checkMoves(t, c, 3)
			})
		}
	}
}

// checkMoves checks every leave and a join from c's stable state, and
// recurses depth times into the states they reach.
func checkMoves(t *testing.T, c *cluster, depth int) {
	t.Helper()
	if depth == 0 {
		return
	}
	for _, leaver := range c.members {
		if len(c.members) == 1 {
			break
		}
		d := c.clone()
		d.members = slices.DeleteFunc(d.members, func(m string) bool { return m == leaver })
		before := slices.Clone(d.holders)
		d.converge(t)
		d.balanced(t, "after "+leaver+" left")
		for s, h := range before {
			if h != leaver {
				assert.Equal(t, h, d.holders[s], "shard %d moved though %s, not its holder, left", s, leaver)
			}
		}
		checkMoves(t, d, depth-1)
	}
	joiner := fmt.Sprintf("joiner-%d-%d", depth, len(c.members))
	d := c.clone()
	d.members = append(d.members, joiner)
	moved := d.converge(t)
	d.balanced(t, "after "+joiner+" joined")
	for to, n := range moved {
		assert.Equal(t, joiner, to, "%d shards moved to %s, not the joiner", n, to)
	}
	bound := (d.shards + len(d.members) - 1) / len(d.members)
	assert.LessOrEqual(t, moved[joiner], bound)
	// The least a join can move: the joiner ranks last, so it takes
	// exactly ⌊S/R⌋ (nothing while S < R).
	assert.Equal(t, d.shards/len(d.members), moved[joiner], "shards moved to the joiner: %v", d.holders)
	if len(d.members) <= 5 {
		checkMoves(t, d, depth-1)
	}
}

// TestAssignRandomHistories runs seeded random sequences of joins, leaves
// and crashes mid-rebalance (a member leaving before the others converged)
// and checks that the rule always converges to a balanced state, and that
// from every stable state a step moves only what it must.
func TestAssignRandomHistories(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 14))
		shards := []int{1, 4, 12, 32}[rng.IntN(4)]
		// Any start, even one the rule would not make (replicas that raced
		// for shards before they saw each other), converges.
		c := &cluster{shards: shards, members: []string{fmt.Sprintf("m%d", rng.IntN(1000)), fmt.Sprintf("m%d", 1000+rng.IntN(1000))}, holders: make([]string, shards)}
		for s := range c.holders {
			c.holders[s] = []string{c.members[0], c.members[1], "", "stranger"}[rng.IntN(4)]
		}
		c.converge(t)
		c.balanced(t, fmt.Sprintf("seed %d start", seed))
		next := 0
		for step := range 30 {
			stable := c.clone()
			join := len(c.members) == 1 || (len(c.members) < 5 && rng.IntN(2) == 0)
			var who string
			if join {
				who = fmt.Sprintf("n%d-%d", next, rng.IntN(1000))
				next++
				c.members = append(c.members, who)
			} else {
				who = c.members[rng.IntN(len(c.members))]
				c.members = slices.DeleteFunc(c.members, func(m string) bool { return m == who })
			}
			moved := c.converge(t)
			c.balanced(t, fmt.Sprintf("seed %d step %d", seed, step))
			for s, h := range stable.holders {
				if join && c.holders[s] != h {
					assert.Equal(t, who, c.holders[s], "seed %d step %d: shard %d moved to a non-joiner", seed, step, s)
				}
				if !join && h != who {
					assert.Equal(t, h, c.holders[s], "seed %d step %d: shard %d moved on %s's leave", seed, step, s, who)
				}
			}
			if join {
				assert.LessOrEqual(t, moved[who], (shards+len(c.members)-1)/len(c.members))
			}
		}
	}
}

func TestAssignIgnoresOrderAndDuplicates(t *testing.T) {
	holders := []string{"b", "", "gone", "a", "c", "c", "c", "", "a", "b", "b", "b"}
	want := Assign(12, []string{"a", "b", "c"}, holders)
	assert.Equal(t, want, Assign(12, []string{"c", "a", "b", "a"}, holders))
	n := map[string]int{}
	for _, m := range want {
		n[m]++
	}
	assert.Equal(t, map[string]int{"a": 4, "b": 4, "c": 4}, n)
	// Each member keeps what it holds: b its four, c its three.
	for _, s := range []int{4, 5, 6} {
		assert.Equal(t, "c", want[s])
	}
	assert.Equal(t, 4, countOf(want, holders, "b"), "b keeps its four")
	assert.Equal(t, []string{"", ""}, Assign(2, nil, []string{"a", "b"}))
	assert.Empty(t, Assign(0, []string{"a"}, nil))
}

func countOf(assignment, holders []string, m string) int {
	n := 0
	for s := range assignment {
		if assignment[s] == m && holders[s] == m {
			n++
		}
	}
	return n
}
