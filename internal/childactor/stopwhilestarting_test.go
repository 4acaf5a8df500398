package childactor_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// orderedController records the order of its calls; its Run blocks until
// released or its context ends.
type orderedController struct {
	release <-chan struct{}
	entered chan struct{}

	mu    sync.Mutex
	calls []string
}

func (c *orderedController) note(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *orderedController) Run(ctx context.Context) error {
	c.note("Run")
	if c.entered != nil {
		close(c.entered)
	}
	select {
	case <-c.release:
	case <-ctx.Done():
		c.note("Run saw its context end")
	}
	c.note("Run returned")
	return nil
}

func (c *orderedController) Shutdown(context.Context) { c.note("Shutdown") }

func (c *orderedController) GetHealth() actors.HealthStatus {
	return actors.HealthStatus{Healthy: true}
}

func (c *orderedController) recorded() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// A Stop that arrives while the start call has not even begun must not run
// Shutdown before it: Run would then start after its Shutdown, and nothing
// would stop what it started. With one P the start goroutine is the last to
// run, which made Shutdown come first in nearly every round before the fix.
func TestStopWhileStartingShutsDownAfterTheStartCall(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	released := make(chan struct{})
	close(released)
	for round := range 50 {
		c := &orderedController{release: released}
		f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
		f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
		f.send(childactor.Stop{Ctx: context.Background()})
		// Run may return before the Stop arrives (the start goroutine can
		// be scheduled between the two sends): then Started comes first.
		report := f.next()
		if _, ok := report.(childactor.Started); ok {
			report = f.next()
		}
		require.IsType(t, childactor.Stopped{}, report, "round %d: Stop answers Stopped", round)
		calls := c.recorded()
		require.NotEmpty(t, calls, "round %d", round)
		assert.Equal(t, "Shutdown", calls[len(calls)-1], "round %d: Shutdown comes last: %v", round, calls)
		assert.Equal(t, "Run", calls[0], "round %d: %v", round, calls)
	}
}

// A start call that blocks is cancelled by the Stop, and its Shutdown runs
// once it has returned.
func TestStopWhileStartingWaitsForTheStartCall(t *testing.T) {
	release := make(chan struct{})
	c := &orderedController{release: release, entered: make(chan struct{})}
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	<-c.entered
	watch := childactor.NewShutdownWatch()
	f.send(childactor.Stop{Ctx: childactor.WithShutdownWatch(context.Background(), watch)})

	// c's Run returns once its context ends, which the Stop did.
	require.IsType(t, childactor.Stopped{}, f.next())
	assert.Equal(t, []string{"Run", "Run saw its context end", "Run returned", "Shutdown"}, c.recorded())
	assert.Empty(t, watch.Unstopped())
	close(release)
}

// A Run that ignores its cancelled context holds its Shutdown back; the
// watch shows it stuck in Run, with Run's stack.
func TestStopWhileStartingReportsARunThatIgnoresItsContext(t *testing.T) {
	release := make(chan struct{})
	c := &stubbornController{orderedController{release: release, entered: make(chan struct{})}}
	f := newFixture(t, childactor.Spec{Name: "c", Kind: actors.KindController, Impl: c})
	f.send(childactor.Start{Gen: 1, Ctx: context.Background()})
	<-c.entered
	watch := childactor.NewShutdownWatch()
	f.send(childactor.Stop{Ctx: childactor.WithShutdownWatch(context.Background(), watch)})

	stuck := watch.Unstopped()
	require.Len(t, stuck, 1)
	assert.Equal(t, "Run", stuck[0].Call, "stuck in the start call, which its Shutdown waits for")
	assert.Contains(t, stuck[0].Stack, "(*stubbornController).Run")
	assert.Contains(t, stuck[0].String(), "its Run has not returned")
	assert.Equal(t, []string{"Run"}, c.recorded(), "no Shutdown while Run runs")

	close(release)
	require.IsType(t, childactor.Stopped{}, f.next())
	assert.Equal(t, []string{"Run", "Run returned", "Shutdown"}, c.recorded())
	assert.Empty(t, watch.Unstopped())
}

// stubbornController's Run ignores its context.
type stubbornController struct{ orderedController }

func (c *stubbornController) Run(context.Context) error {
	c.note("Run")
	close(c.entered)
	<-c.release
	c.note("Run returned")
	return nil
}
