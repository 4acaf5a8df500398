package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

// largeN is the size -large adds: it fits in the 24 GiB of the project's machines.
const largeN = 100_000

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// mainErr parses the flags, runs the harness and prints the table.
func mainErr() error {
	var (
		sizesFlag = flag.String("n", "100,1000,10000", "comma-separated numbers of children")
		large     = flag.Bool("large", false, fmt.Sprintf("also measure N=%d", largeN))
		reps      = flag.Int("reps", 5, "cycles per system and N; the table gives the median")
		restarts  = flag.Int("restarts", 100, "restart samples per cycle (at most N)")
		quick     = flag.Bool("quick", false, "smoke run: -n 100,1000 -reps 3 -restarts 20, unless given")
		only      = flag.String("systems", "", "comma-separated systems to run (default: all, with -tree's)")
		trees     = flag.String("tree", "", "comma-separated tree shapes, e.g. 100x100,10x10x100: adds suture-SHAPE and ours-SHAPE, run at the N each holds")
		jsonFile  = flag.String("json", "", "also write the results as JSON to this file")
		timeout   = flag.Duration("timeout", 10*time.Minute, "bound on one cycle")
		quiet     = flag.Bool("q", false, "no progress lines on stderr")
	)
	flag.Parse()

	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["n"] {
			*sizesFlag = "100,1000"
		}
		if !set["reps"] {
			*reps = 3
		}
		if !set["restarts"] {
			*restarts = 20
		}
	}

	sizes, err := parseSizes(*sizesFlag)
	if err != nil {
		return err
	}
	if *large && !slices.Contains(sizes, largeN) {
		sizes = append(sizes, largeN)
	}
	if *reps < 1 {
		return errors.New("-reps must be at least 1")
	}
	if *restarts < 0 {
		return errors.New("-restarts must not be negative")
	}
	shapes, err := parseShapes(*trees)
	if err != nil {
		return err
	}
	for _, sh := range shapes {
		if !slices.Contains(sizes, sh.size()) {
			return fmt.Errorf("-tree: %s holds %d children; add %d to -n", sh, sh.size(), sh.size())
		}
	}
	makers, err := selectSystems(*only, shapes)
	if err != nil {
		return err
	}

	s := settings{sizes: sizes, reps: *reps, restarts: *restarts, timeout: *timeout}
	if !*quiet {
		s.progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := run(ctx, s, makers)
	if err != nil {
		return err
	}
	if err := writeTable(os.Stdout, r); err != nil {
		return err
	}
	if *jsonFile != "" {
		f, err := os.Create(*jsonFile)
		if err != nil {
			return err
		}
		if err := writeJSON(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// parseSizes parses "100,1000" into positive sizes.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for field := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(field), "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-n: %q is not a positive number", field)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// withTrees is allSystems with, for each shape, suture's nested supervisors among the
// peers (before ours) and ours' tree after flat ours.
func withTrees(shapes []shape) []func() system {
	peers, ours := treeSystems(shapes)
	last := len(allSystems) - 1 // ours
	all := slices.Concat(allSystems[:last], peers, allSystems[last:], ours)
	return all
}

// selectSystems returns the systems named in a comma-separated list, among allSystems
// and the trees of shapes; all of them if the list is empty.
func selectSystems(list string, shapes []shape) ([]func() system, error) {
	all := withTrees(shapes)
	if list == "" {
		return all, nil
	}
	var picked []func() system
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(all, func(m func() system) bool { return m().Name() == name })
		if i < 0 {
			var names []string
			for _, m := range all {
				names = append(names, m().Name())
			}
			return nil, fmt.Errorf("-systems: unknown system %q (there are %s; a tree's needs -tree)", name, strings.Join(names, ", "))
		}
		picked = append(picked, all[i])
	}
	return picked, nil
}
