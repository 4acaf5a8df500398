package main

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// opsN is the size of BenchmarkOperations: the N, a tree of 100x100 or 10x10x100.
const opsN = 10_000

// opsSystems are the systems BenchmarkOperations compares, by the harness's names.
var opsSystems = []func() system{
	func() system { return &oursSystem{} },
	func() system { return &oursSystem{shape: shape{100, 100}} },
	func() system { return &oursSystem{shape: shape{10, 10, 100}} },
	func() system { return &sutureSystem{} },
	func() system { return &sutureSystem{shape: shape{100, 100}} },
	func() system { return &sutureSystem{shape: shape{10, 10, 100}} },
}

// BenchmarkOperations times one operation of the harness's cycle at a time, for
// profiles (the harness measures a whole cycle; a CPU profile of it mixes every
// operation and system). For example, flat ours against its tree of 100x100, health
// sweeps only:
//
//	go test -run '^$' -bench 'Operations/ours/health' -cpuprofile /tmp/flat.prof
//	go test -run '^$' -bench 'Operations/ours-100x100/health' -cpuprofile /tmp/tree.prof
//	go tool pprof -top -diff_base /tmp/flat.prof bench.test /tmp/tree.prof
//
// Besides ns/op (wall time, which a loaded machine inflates), each reports cpu-ns/op:
// the process's CPU time (user and system, every goroutine's, the collector's
// included) over the timed part, which other processes on the machine change less.
//
// Each profile covers the whole process, so start's includes the shutdowns between its
// iterations and shutdown's the starts; diff against the flat system's to see what the
// tree adds.
func BenchmarkOperations(b *testing.B) {
	for _, newSystem := range opsSystems {
		name := newSystem().Name()
		b.Run(name+"/start", func(b *testing.B) {
			cpu := startCPU(b)
			for range b.N {
				sys, children := newSystem(), newChildren(opsN)
				if err := startAll(b.Context(), sys, children); err != nil {
					b.Fatal(err)
				}
				cpu.stop()
				if err := sys.Shutdown(b.Context()); err != nil {
					b.Fatal(err)
				}
				cpu.start()
			}
			cpu.report()
		})
		b.Run(name+"/shutdown", func(b *testing.B) {
			cpu := startCPU(b)
			for range b.N {
				cpu.stop()
				sys := newSystem()
				if err := startAll(b.Context(), sys, newChildren(opsN)); err != nil {
					b.Fatal(err)
				}
				cpu.start()
				if err := sys.Shutdown(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report()
		})
		if _, ok := newSystem().(healthSweeper); ok {
			b.Run(name+"/health", func(b *testing.B) {
				sys := started(b, newSystem, newChildren(opsN))
				cpu := startCPU(b)
				for range b.N {
					healthy, err := sys.(healthSweeper).HealthSweep(b.Context())
					if err != nil {
						b.Fatal(err)
					}
					if healthy != opsN {
						b.Fatalf("%d of %d children healthy", healthy, opsN)
					}
				}
				cpu.report()
			})
		}
		b.Run(name+"/restart", func(b *testing.B) {
			children := newChildren(opsN)
			sys := started(b, newSystem, children)
			cpu := startCPU(b)
			for k := range b.N {
				i := k * 7919 % opsN // spread over the groups
				children[i].forgetRuns()
				if err := sys.(restarter).Fail(b.Context(), i); err != nil {
					b.Fatal(err)
				}
				if err := children[i].waitRunning(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report()
		})
	}
}

// cpuTimer follows b's timer and adds up the process's CPU time while it runs.
type cpuTimer struct {
	b       *testing.B
	total   time.Duration
	since   time.Duration // the process's CPU time when the timer last started
	running bool
}

// startCPU resets b's timer and starts a cpuTimer with it.
func startCPU(b *testing.B) *cpuTimer {
	b.ResetTimer()
	return &cpuTimer{b: b, since: processCPU(b), running: true}
}

// stop stops b's timer and this one.
func (t *cpuTimer) stop() {
	t.b.StopTimer()
	t.total += processCPU(t.b) - t.since
	t.running = false
}

// start starts b's timer and this one again.
func (t *cpuTimer) start() {
	t.since = processCPU(t.b)
	t.running = true
	t.b.StartTimer()
}

// report stops the timers and reports cpu-ns/op.
func (t *cpuTimer) report() {
	if t.running {
		t.stop()
	}
	t.b.ReportMetric(float64(t.total.Nanoseconds())/float64(t.b.N), "cpu-ns/op")
}

// processCPU is the CPU time, user and system, the process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startAll starts sys with children and waits until every child has run.
func startAll(ctx context.Context, sys system, children []*child) error {
	if err := sys.Start(ctx, children); err != nil {
		return err
	}
	for _, c := range children {
		if err := c.waitRunning(ctx); err != nil {
			return err
		}
	}
	return nil
}

// started is a started system of newSystem's, shut down when b ends.
func started(b *testing.B, newSystem func() system, children []*child) system {
	sys := newSystem()
	if err := startAll(b.Context(), sys, children); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := sys.Shutdown(context.WithoutCancel(b.Context())); err != nil {
			b.Error(err)
		}
	})
	return sys
}
