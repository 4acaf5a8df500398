// Command soak runs a ControllerManager with a few hundred children under
// random faults at a steady rate for hours (package internal/chaos), and
// prints, every interval, the live heap, the goroutines and the restart
// rate, so that a leak shows as a trend. At the end it settles the tree,
// checks the books (events, Status, metrics and the children's own
// records), shuts the manager down and exits non-zero if an invariant broke
// or anything of the manager's was left running.
//
//	go run ./cmd/soak -for 30m -every 1m
//
// With -fleet N it soaks a Fleet of N member clusters instead (fleet.go).
//
//	go run ./cmd/soak -fleet 50 -for 30m -every 1m
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/actorkube/controllermanager/internal/testkit/chaos"
)

func main() {
	var (
		duration   = flag.Duration("for", time.Hour, "how long to inject faults")
		interval   = flag.Duration("every", time.Minute, "how often to print the figures")
		children   = flag.Int("children", 300, "children at the start: 60% controllers, 15% stores, 25% webhooks")
		faultRate  = flag.Float64("fault-rate", 20, "faults per second, across the manager")
		lifecycle  = flag.Float64("lifecycle-rate", 2, "lifecycle messages per second")
		admission  = flag.Int("admission", 2, "concurrent admission clients")
		admRate    = flag.Float64("admission-rate", 100, "reviews per second per admission client (0: as fast as answered)")
		seed       = flag.Uint64("seed", 0, "seed of the random choices (default: from the time)")
		quietStart = flag.Bool("quiet", false, "print only the table and the verdict")
		profiles   = flag.String("heap-profiles", "", "a directory to write a heap profile to at every interval (heap-<elapsed>.pprof), to find what grows with go tool pprof -base; with -fleet, at the two settled states")
		members    = flag.Int("fleet", 0, "soak a Fleet of this many member clusters instead (fake API servers): outages, disengages and engages, rotations, controller failures and provider restarts, -fault-rate a second")
	)
	flag.Parse()
	if *profiles != "" {
		runtime.MemProfileRate = 4 << 10 // fine enough to see a few kB a minute grow
	}
	if *members > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runFleetSoak(ctx, fleetSoakConfig{members: *members, duration: *duration, interval: *interval,
			faultRate: *faultRate, seed: *seed, quiet: *quietStart, profiles: *profiles}); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*duration, *interval, *children, *faultRate, *lifecycle, *admission, *admRate, *seed, *quietStart, *profiles); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(duration, interval time.Duration, children int, faultRate, lifecycle float64, admission int, admRate float64, seed uint64, quiet bool, profiles string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	goroutinesBefore := runtime.NumGoroutine()
	h, err := chaos.New(chaos.Config{
		Controllers: children * 60 / 100, Stores: children * 15 / 100, Webhooks: children - children*60/100 - children*15/100,
		FaultRate: faultRate, LifecycleRate: lifecycle, AdmissionClients: admission, AdmissionRate: admRate, Seed: seed,
	})
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	fmt.Printf("soak: %d children, %.0f faults/s, %.1f lifecycle messages/s, %d admission clients at %.0f reviews/s, for %s, seed %d\n",
		children, faultRate, lifecycle, admission, admRate, duration, h.Seed())
	fmt.Printf("%8s %10s %10s %10s %10s %8s %9s %10s %9s %8s %10s %5s\n",
		"elapsed", "heap-live", "heap-inuse", "sys", "goroutines", "children", "restarts", "restarts/s", "failures", "faults", "admission", "viol")

	begin := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(runCtx, duration)
	}()
	prev := h.Snapshot()
	prevAt := begin
	print := func(now time.Time) {
		s := h.Snapshot()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		restarts := s.Restarts - prev.Restarts
		fmt.Printf("%8s %9.1fM %9.1fM %9.1fM %10d %8d %9d %10.1f %9d %8d %10d %5d\n",
			now.Sub(begin).Round(time.Second), mib(ms.HeapAlloc), mib(ms.HeapInuse), mib(ms.Sys), runtime.NumGoroutine(),
			s.Children, restarts, float64(restarts)/now.Sub(prevAt).Seconds(), s.Failures-prev.Failures,
			sum(s.Injected)-sum(prev.Injected), sum(s.Admission)-sum(prev.Admission), s.Violations)
		prev, prevAt = s, now
		if profiles != "" {
			if err := writeHeapProfile(profiles, now.Sub(begin)); err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
			}
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
loop:
	for {
		select {
		case now := <-tick.C:
			print(now)
		case <-done:
			break loop
		}
	}
	print(time.Now())

	settle, cancelSettle := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelSettle()
	if err := h.Settle(settle); err != nil {
		return err
	}
	if err := h.Verify(settle); err != nil {
		return err
	}
	m := h.Manager()
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), time.Minute)
	defer cancelShutdown()
	m.ShutdownAndWait(shutdownCtx)
	if err := m.Err(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	h.Final()
	h.Close()
	made, _ := h.Children()
	if !quiet {
		fmt.Printf("\n%d children made in all; %s\n", made, h.Snapshot())
	}
	// Everything of the manager's has stopped: only the runtime's and this
	// program's goroutines remain.
	left := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); left > goroutinesBefore && time.Now().Before(deadline); left = runtime.NumGoroutine() {
		time.Sleep(50 * time.Millisecond) // a program, not a test: polling the count is all there is
	}
	violations, n := h.Violations()
	for _, v := range violations {
		fmt.Println("violation:", v)
	}
	fmt.Printf("goroutines: %d before the manager, %d after its shutdown\n", goroutinesBefore, left)
	if n > 0 || left > goroutinesBefore {
		return fmt.Errorf("%d invariants broken, %d goroutines left over", n, left-goroutinesBefore)
	}
	fmt.Println("soak: every invariant held")
	return nil
}

// writeHeapProfile writes the heap profile (just after a GC) to
// dir/heap-<elapsed>.pprof.
func writeHeapProfile(dir string, elapsed time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%06.0fs.pprof", elapsed.Seconds())))
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
