package controllermanager_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

type backoffCtl struct{ name string }

func (c backoffCtl) Name() string               { return c.name }
func (c backoffCtl) Run(context.Context) error  { return nil }
func (c backoffCtl) Shutdown(context.Context)   {}
func (c backoffCtl) GetHealth() cm.HealthStatus { return cm.HealthStatus{Name: c.name, Healthy: true} }

func backoffManager(t *testing.T, root cm.SupervisionSpec) *cm.ControllerManager {
	t.Helper()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{Supervision: &root}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m
}

func backoffs(initial, max time.Duration) cm.SupervisionSpec {
	return cm.SupervisionSpec{InitialBackoff: metav1.Duration{Duration: initial}, MaxBackoff: metav1.Duration{Duration: max}}
}

// A group whose InitialBackoff exceeds its MaxBackoff, either its own or
// inherited from the levels above, is refused: the first restart would
// otherwise wait MaxBackoff, silently, not the InitialBackoff asked for.
func TestGroupInitialBackoffAboveMaxBackoff(t *testing.T) {
	const ms = time.Millisecond
	t.Run("own, at Start", func(t *testing.T) {
		m := backoffManager(t, cm.SupervisionSpec{})
		m.Add(cm.NewGroup("g", backoffs(3*time.Second, 300*ms), backoffCtl{"x"}))
		err := m.Start(context.Background(), 5*time.Second)
		require.ErrorContains(t, err, `"g"`)
		require.ErrorContains(t, err, "initialBackoff")
		require.ErrorContains(t, err, "maxBackoff")
	})
	t.Run("initial own, max the manager's, at Start", func(t *testing.T) {
		m := backoffManager(t, backoffs(100*ms, 300*ms))
		m.Add(cm.NewGroup("g", backoffs(3*time.Second, 0), backoffCtl{"x"}))
		err := m.Start(context.Background(), 5*time.Second)
		require.ErrorContains(t, err, `"g"`)
		require.ErrorContains(t, err, "initialBackoff 3s")
		require.ErrorContains(t, err, "maxBackoff 300ms")
	})
	t.Run("both inherited from different levels, at Start", func(t *testing.T) {
		m := backoffManager(t, backoffs(100*ms, 10*time.Second))
		m.Add(cm.NewGroup("outer", backoffs(3*time.Second, 0),
			cm.NewGroup("inner", backoffs(0, 300*ms), backoffCtl{"x"})))
		err := m.Start(context.Background(), 5*time.Second)
		require.ErrorContains(t, err, `"outer/inner"`)
	})
	t.Run("inherited, at AddChild", func(t *testing.T) {
		m := backoffManager(t, backoffs(100*ms, 300*ms))
		m.Add(cm.NewGroup("outer", backoffs(0, 10*time.Second), backoffCtl{"x"}))
		require.NoError(t, m.Start(context.Background(), 5*time.Second))
		err := m.AddChild(context.Background(), cm.NewGroup("g", backoffs(3*time.Second, 0), backoffCtl{"y"}))
		require.ErrorContains(t, err, `"g"`)
		require.ErrorContains(t, err, "initialBackoff 3s")
		// under outer, whose MaxBackoff is 10s, the same group is fine
		_, err = m.Request(context.Background(), supervisor.AddChild{Parent: "outer", Runnable: cm.NewGroup("h", backoffs(3*time.Second, 0), backoffCtl{"z"})})
		require.NoError(t, err)
	})
	t.Run("equal is fine", func(t *testing.T) {
		m := backoffManager(t, cm.SupervisionSpec{})
		m.Add(cm.NewGroup("g", backoffs(time.Second, time.Second), backoffCtl{"x"}))
		require.NoError(t, m.Start(context.Background(), 5*time.Second))
	})
}
