package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// sweepBudget is roughly how many child health queries one timed health measurement
// makes: small N are swept several times and the time divided, so that a sweep of 100
// children is not lost in timer resolution.
const sweepBudget = 10_000

// cycle is what one system measured in one cycle at one N.
type cycle struct {
	start, shutdown    time.Duration
	health             time.Duration // per sweep; meaningful only if hasHealth
	hasHealth          bool
	restarts           []time.Duration // nil unless the system restarts children
	heapPerChild       float64         // bytes of live heap
	stackPerChild      float64         // bytes of goroutine stacks, which the heap does not count
	goroutinesPerChild float64
}

// runCycle hosts n fresh children in a fresh system and measures, in order: start until
// every child runs; heap and goroutines per idle child; health sweeps; up to restarts
// restarts of distinct children, one at a time; shutdown. It then checks that every
// run of every child was shut down.
func runCycle(ctx context.Context, sys system, n, restarts int) (res cycle, err error) {
	children := newChildren(n)
	started := false
	defer func() {
		if err != nil && started {
			// Best effort, so that a failed cycle does not leave work behind.
			_ = sys.Shutdown(ctx)
		}
	}()

	before := idleFootprint()
	t0 := time.Now()
	started = true
	if err := sys.Start(ctx, children); err != nil {
		return res, fmt.Errorf("start: %w", err)
	}
	for _, c := range children {
		if err := c.waitRunning(ctx); err != nil {
			return res, fmt.Errorf("start: %w", err)
		}
	}
	res.start = time.Since(t0)

	after := idleFootprint()
	res.heapPerChild = (float64(after.heap) - float64(before.heap)) / float64(n)
	res.stackPerChild = (float64(after.stack) - float64(before.stack)) / float64(n)
	res.goroutinesPerChild = float64(after.goroutines-before.goroutines) / float64(n)

	if hs, ok := sys.(healthSweeper); ok {
		sweeps := max(1, sweepBudget/n)
		t0 := time.Now()
		for range sweeps {
			healthy, err := hs.HealthSweep(ctx)
			if err != nil {
				return res, fmt.Errorf("health: %w", err)
			}
			if healthy != n {
				return res, fmt.Errorf("health: %d of %d children healthy", healthy, n)
			}
		}
		res.health = time.Since(t0) / time.Duration(sweeps)
		res.hasHealth = true
	}

	if r, ok := sys.(restarter); ok {
		samples := min(restarts, n)
		res.restarts = make([]time.Duration, 0, samples)
		for k := range samples {
			c := children[k*n/samples]
			c.forgetRuns()
			t0 := time.Now()
			if err := r.Fail(ctx, k*n/samples); err != nil {
				return res, fmt.Errorf("fail %s: %w", c.name, err)
			}
			if err := c.waitRunning(ctx); err != nil {
				return res, fmt.Errorf("restart: %w", err)
			}
			res.restarts = append(res.restarts, time.Since(t0))
		}
	}

	t0 = time.Now()
	started = false
	if err := sys.Shutdown(ctx); err != nil {
		return res, fmt.Errorf("shutdown: %w", err)
	}
	res.shutdown = time.Since(t0)

	for _, c := range children {
		if runs, shutdowns := c.runs.Load(), c.shutdowns.Load(); runs == 0 || runs != shutdowns {
			return res, fmt.Errorf("%s: %d runs, %d shutdowns", c.name, runs, shutdowns)
		}
	}
	return res, nil
}

// footprint is the process's memory and goroutines at one moment.
type footprint struct {
	heap, stack uint64 // bytes: live heap, goroutine stacks in use
	goroutines  int
}

// idleFootprint lets goroutines that are ending end, collects garbage and reads the
// footprint.
func idleFootprint() footprint {
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now == goroutines {
			break
		}
		goroutines = now
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return footprint{heap: m.HeapAlloc, stack: m.StackInuse, goroutines: goroutines}
}
