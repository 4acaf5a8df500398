package ctrlruntime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/supervisor"
)

// deafRunnable is a manager.Runnable whose Start ignores its context until
// release is closed; it counts its Starts and the most that ran at once.
type deafRunnable struct {
	starts, running, most atomic.Int32
	release               chan struct{}
}

func (d *deafRunnable) Start(context.Context) error {
	d.starts.Add(1)
	n := d.running.Add(1)
	defer d.running.Add(-1)
	for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
	}
	<-d.release
	return nil
}

// RestartChild of an Added runnable whose Start ignores its context: its
// Shutdown (ShutdownTimeout 1s) must not return while Start runs, or the
// next incarnation calls Start on the same value while the first still
// runs (controller-runtime starts a runnable once). The restart waits, as
// RestartChild documents: the child stays Stopping and RestartChild
// returns its context's error; once Start returns, the runnable starts
// again.
func TestEnvRestartNeverStartsAnAddedRunnableTwiceAtOnce(t *testing.T) {
	cfg := testenv.Config(t)
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: time.Second}})
	require.NoError(t, err)
	deaf := &deafRunnable{release: make(chan struct{})}
	require.NoError(t, mgr.Add(deaf))
	startManager(t, mgr)
	released := false
	t.Cleanup(func() {
		if !released {
			close(deaf.release) // before the manager stops
		}
	})
	require.Eventually(t, func() bool { return deaf.running.Load() == 1 }, 30*time.Second, 5*time.Millisecond)
	st, err := mgr.ControllerManager().Status(context.Background())
	require.NoError(t, err)
	require.Len(t, st.Children, 1)
	child := st.Children[0].Name

	// Four times the ShutdownTimeout: the restart would have gone on
	// (Shutdown returned at 1s) well before the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	err = mgr.ControllerManager().RestartChild(ctx, child)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the restart waits for Start to return")
	require.EqualValues(t, 1, deaf.most.Load(), "Start called again while the first Start runs")
	require.EqualValues(t, 1, deaf.starts.Load())
	st, err = mgr.ControllerManager().Status(context.Background())
	require.NoError(t, err)
	cs, ok := st.Child(child)
	require.True(t, ok)
	assert.Equal(t, supervisor.StateStopping, cs.State)
	assert.True(t, errors.Is(mgr.ControllerManager().RestartChild(context.Background(), child), cm.ErrBusy))

	released = true
	close(deaf.release)
	require.Eventually(t, func() bool { return deaf.starts.Load() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the runnable starts again once its Start has returned")
	require.EqualValues(t, 1, deaf.most.Load())
}

// failingOnce is a manager.Runnable whose first Start fails at once.
type failingOnce struct{ starts atomic.Int32 }

func (f *failingOnce) Start(ctx context.Context) error {
	if f.starts.Add(1) == 1 {
		return errors.New("first start fails")
	}
	<-ctx.Done()
	return nil
}

// A restart the supervisor decides (AllForOne: a sibling failed) whose
// Shutdown of a runnable deaf to its context does not return within
// ShutdownTimeout escalates: the manager fails, rather than wait for ever
// or start the runnable a second time beside the first.
func TestEnvRestartEscalatesWhenARunnableDoesNotStop(t *testing.T) {
	cfg := testenv.Config(t)
	mgr, err := ctrlruntime.NewManagerWithSupervision(cfg, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"}},
		cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: time.Second}, Strategy: supervisor.AllForOne})
	require.NoError(t, err)
	deaf := &deafRunnable{release: make(chan struct{})}
	defer close(deaf.release)
	require.NoError(t, mgr.Add(deaf))
	require.NoError(t, mgr.Add(&failingOnce{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	select {
	case err := <-stopped:
		require.Error(t, err, "the restart's Shutdown did not return: the manager fails")
		t.Logf("Start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the manager neither escalated nor stopped within 30s of a Shutdown hung past ShutdownTimeout")
	}
	require.EqualValues(t, 1, deaf.most.Load(), "Start called again while the first Start runs")
}
