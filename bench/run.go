package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// settings are what the flags choose.
type settings struct {
	sizes    []int         // N, in row order
	reps     int           // cycles per (system, N)
	restarts int           // restart samples per cycle, at most N
	timeout  time.Duration // bound on one cycle
	progress io.Writer     // one line per cycle; nil for none
}

// run measures every system at every size, reps times. Within each round it takes every
// size, and at each size every system in turn, starting one system further along in each
// round: so noise on the shared machine, and any cost of going first, falls on all alike.
// A system of a fixed size (a tree) runs only at that N; its cells elsewhere are n/a.
func run(ctx context.Context, s settings, makers []func() system) (*report, error) {
	names := make([]string, len(makers))
	fixed := make([]int, len(makers)) // 0: any N
	for i, m := range makers {
		sys := m()
		names[i] = sys.Name()
		if sz, ok := sys.(sizedSystem); ok {
			fixed[i] = sz.Size()
			if fixed[i] != 0 && !slices.Contains(s.sizes, fixed[i]) {
				return nil, fmt.Errorf("%s holds %d children, and -n has no such size", names[i], fixed[i])
			}
		}
	}
	cycles := make(map[int][][]cycle, len(s.sizes)) // N → system → cycles
	for _, n := range s.sizes {
		cycles[n] = make([][]cycle, len(makers))
	}

	// Every system starts a goroutine per child at some point (to run Run, Serve or a
	// Runnable), some of them all at once; see warmGoroutines.
	warmGoroutines(2*slices.Max(s.sizes) + 1000)

	for rep := range s.reps {
		for _, n := range s.sizes {
			for k := range makers {
				i := (k + rep) % len(makers)
				if size := fixed[i]; size != 0 && size != n {
					continue // a tree runs only at the N its shape holds
				}
				if s.progress != nil {
					fmt.Fprintf(s.progress, "rep %d/%d  N=%d  %s\n", rep+1, s.reps, n, names[i])
				}
				cctx, cancel := context.WithTimeout(ctx, s.timeout)
				c, err := runCycle(cctx, makers[i](), n, s.restarts)
				cancel()
				if err != nil {
					return nil, fmt.Errorf("%s at N=%d: %w", names[i], n, err)
				}
				cycles[n][i] = append(cycles[n][i], c)
			}
		}
	}

	r := &report{
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Reps:       s.reps,
		Sizes:      s.sizes,
		Systems:    names,
	}
	for _, n := range s.sizes {
		for i, name := range names {
			r.Results = append(r.Results, summarize(name, n, cycles[n][i])...)
		}
	}
	return r, nil
}
