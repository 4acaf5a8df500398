package childactor_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
)

// A sweep's deadline runs on the clock it is given: a silent entry holds it
// until that clock passes the timeout, and is then reported silent; abort
// ends the wait at once.
func TestHealthSweepDeadlineIsOnItsClock(t *testing.T) {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	for _, tt := range []struct {
		name  string
		abort bool
	}{{name: "deadline"}, {name: "abort", abort: true}} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			sweep := childactor.StartHealthSweep(system, clk, time.Second, func(col *childactor.HealthCollector) {
				col.Expect([]actors.HealthStatus{{Name: "answers"}, {Name: "silent"}}, []int{0, 1})
				system.Root.Send(col.PID(), childactor.HealthAnswer{Index: 0, Status: actors.HealthStatus{Healthy: true}})
			})
			abort := make(chan struct{})
			waited := make(chan struct{})
			go func() {
				sweep.Wait(abort)
				close(waited)
			}()
			select {
			case <-waited:
				t.Fatal("Wait returned with an entry unanswered, before the deadline")
			default:
			}
			if tt.abort {
				close(abort)
			} else {
				require.True(t, clk.HasWaiters(), "the deadline is a timer of the sweep's clock")
				clk.Step(time.Second)
			}
			select {
			case <-waited:
			case <-time.After(wait):
				t.Fatal("Wait did not return")
			}
			statuses, ok := sweep.Close()
			require.True(t, ok)
			assert.Equal(t, []actors.HealthStatus{
				{Name: "answers", Healthy: true},
				{Name: "silent", Message: "no health answer within 1s"},
			}, statuses)
		})
	}
}
