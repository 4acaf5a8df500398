package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// sweepBudget is roughly how many child health queries one timed health measurement
// makes: small N are swept several times and the time divided, so that a sweep of 100
// children is not lost in timer resolution.
const sweepBudget = 10_000

// settleTimeout bounds the wait for the goroutine count to hold still: at N=100,000
// the goroutines a system starts only to start its children take a while to end.
const settleTimeout = 2 * time.Second

// heapSettle is when idleFootprint takes the live heap to hold still: agree
// consecutive readings, poll apart, each within 0.1% of the one before. The harness
// test shortens it: it checks the table, not the figures, and runs many cycles.
var heapSettle = struct {
	poll  time.Duration
	agree int
}{poll: 10 * time.Millisecond, agree: 5}

// cycle is what one system measured in one cycle at one N.
type cycle struct {
	start, shutdown    time.Duration
	health             time.Duration // per sweep; meaningful only if hasHealth
	hasHealth          bool
	restarts           []time.Duration // nil unless the system restarts children
	heapPerChild       float64         // bytes of live heap
	goroutinesPerChild float64
}

// runCycle hosts n fresh children in a fresh system and measures, in order: start until
// every child runs; heap and goroutines per idle child (against the lower of the
// footprints before start and after shutdown); health sweeps; up to restarts restarts of
// distinct children, one at a time; shutdown. It then checks that every run of every
// child was shut down.
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

	// The footprint once the system is gone is a second baseline: memory an
	// earlier cycle still held when this one began (a stopped system's timers
	// can keep it alive for a while) may be freed during this cycle, and
	// counting from before would then charge this system less than nothing.
	// Memory this system keeps after its own shutdown leaves end above before,
	// so taking the lower of the two never hides this system's own cost.
	end := idleFootprint()
	res.heapPerChild = (float64(after.heap) - float64(min(before.heap, end.heap))) / float64(n)
	res.goroutinesPerChild = float64(after.goroutines-min(before.goroutines, end.goroutines)) / float64(n)

	for _, c := range children {
		if runs, shutdowns := c.runs.Load(), c.shutdowns.Load(); runs == 0 || runs != shutdowns {
			return res, fmt.Errorf("%s: %d runs, %d shutdowns", c.name, runs, shutdowns)
		}
	}
	return res, nil
}

// footprint is the process's memory and goroutines at one moment.
type footprint struct {
	heap       uint64 // bytes of live heap
	goroutines int
}

// idleFootprint lets goroutines that are ending end, lets work already queued finish
// (the live heap holds still over several collections: a system's events still being
// delivered to its subscribers are not part of an idle child), and reads the footprint.
//
// Goroutine stacks are left out: the runtime keeps dead goroutines' stacks and
// descriptors for reuse, so whether a cycle pays for its goroutines depends on what ran
// before it. goroutines/child is the honest measure of that cost (each at least the
// 2 KiB starting stack plus a descriptor of a few hundred bytes).
func idleFootprint() footprint {
	runtime.GC()
	goroutines, steady := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(settleTimeout); steady < 3 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		if now := runtime.NumGoroutine(); now != goroutines {
			goroutines, steady = now, 0
		} else {
			steady++
		}
	}
	heap, steady := liveHeap(), 0
	for deadline := time.Now().Add(settleTimeout); steady < heapSettle.agree && time.Now().Before(deadline); {
		time.Sleep(heapSettle.poll)
		now := liveHeap()
		if diff := int64(now) - int64(heap); diff > int64(heap)/1000 || -diff > int64(heap)/1000 {
			steady = 0
		} else {
			steady++
		}
		heap = now
	}
	return footprint{heap: heap, goroutines: goroutines}
}

// liveHeap collects garbage and returns the bytes of live heap.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// warmGoroutines has n goroutines exist at once, then end, before anything is measured.
// The runtime never frees a goroutine's descriptor (a few hundred bytes of heap); it
// reuses it. Without this, the first system to run n goroutines at once would have those
// descriptors counted in its heap/child, and the systems after it would not.
func warmGoroutines(n int) {
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	var ended sync.WaitGroup
	for range n {
		ended.Go(func() {
			started.Done()
			release.Wait()
		})
	}
	started.Wait()
	release.Done()
	ended.Wait()
}
