package ctrlruntime_test

import (
	"context"
	"testing"
)

// BenchmarkControllerRestart is one restart of a reconciler as the
// supervisor does it: Shutdown, then Run, which builds a fresh
// controller-runtime controller and waits for its sources on the (already
// synced, here fake) shared cache.
func BenchmarkControllerRestart(b *testing.B) {
	ctx, _ := fakeContext(b)
	c, err := newBenchController(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Shutdown(context.Background())
		if err := c.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	c.Shutdown(context.Background())
}
