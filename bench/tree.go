package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// shape is a supervision tree's fan-out, from the root down: {100, 100} is 100 groups
// of 100 children (the children at depth 2), {10, 10, 100} is 10 groups of 10 groups of
// 100 children (depth 3). The last number is the children per innermost group; a
// shape has at least two numbers (one would be the flat system).
type shape []int

// String is the shape as -tree takes it: "100x100".
func (s shape) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = strconv.Itoa(f)
	}
	return strings.Join(parts, "x")
}

// size is how many children the shape holds: the product of its numbers.
func (s shape) size() int {
	n := 1
	for _, f := range s {
		n *= f
	}
	return n
}

// depth is the depth of the children: the root's own children are at depth 1.
func (s shape) depth() int { return len(s) }

// split lays children out in the shape: group builds each group from its index among
// its siblings and its members (children, or groups one level down). It returns the
// root's members. children must hold exactly s.size() values, in order, so that
// children[k] is in group k / (s.size() / s[0]) of the root.
func split[T any](s shape, children []T, group func(i int, members []T) T) []T {
	if len(s) == 1 {
		return children
	}
	per := len(children) / s[0]
	members := make([]T, s[0])
	for i := range members {
		members[i] = group(i, split(s[1:], children[i*per:(i+1)*per], group))
	}
	return members
}

// parseShapes parses -tree: comma-separated shapes such as "100x100,10x10x100".
func parseShapes(list string) ([]shape, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var shapes []shape
	for field := range strings.SplitSeq(list, ",") {
		field = strings.TrimSpace(field)
		var s shape
		for f := range strings.SplitSeq(field, "x") {
			n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-tree: %q: %q is not a positive number", field, f)
			}
			s = append(s, n)
		}
		if len(s) < 2 {
			return nil, fmt.Errorf("-tree: %q: a tree needs at least two levels, such as 100x100", field)
		}
		if slices.ContainsFunc(shapes, func(o shape) bool { return slices.Equal(o, s) }) {
			return nil, fmt.Errorf("-tree: %q is given twice", field)
		}
		shapes = append(shapes, s)
	}
	return shapes, nil
}

// treeName is the column of a system's tree of shape s: "ours-100x100".
func treeName(system string, s shape) string { return system + "-" + s.String() }

// splitTreeName undoes treeName: "ours-100x100" is ours' tree of 100x100; a flat
// system's name ("controller-runtime") is not a tree's.
func splitTreeName(name string) (system string, s shape, ok bool) {
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return "", nil, false
	}
	shapes, err := parseShapes(name[i+1:])
	if err != nil || len(shapes) != 1 {
		return "", nil, false
	}
	return name[:i], shapes[0], true
}

// treeSystems are, for each shape, suture's nested supervisors and ours' groups, in
// column order: the nested peers, then ours' trees. Each runs only at the N its shape
// holds.
func treeSystems(shapes []shape) (peers, ours []func() system) {
	for _, s := range shapes {
		peers = append(peers, func() system { return &sutureSystem{shape: s} })
		ours = append(ours, func() system { return &oursSystem{shape: s} })
	}
	return peers, ours
}

// sizedSystem is a system that hosts only one number of children: a tree, whose shape
// fixes it.
type sizedSystem interface {
	// Size is the number of children the system hosts.
	Size() int
}
