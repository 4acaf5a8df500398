package controllermanager_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
)

// AddSharded and AddShardedGroup refuse a base name that is empty, blank or
// otherwise not a valid name: "" and " " were accepted, their shards
// named "-0", "-1", … and " -0", … (a "/" or a newline were already
// refused, through the shards' names).
func TestShardedBaseNameIsValidated(t *testing.T) {
	ctl := func(cm.Shard) cm.Controller { return backoffCtl{"x"} }
	grp := func(cm.Shard) []cm.Runnable { return []cm.Runnable{backoffCtl{"x"}} }
	for name, add := range map[string]func(m *cm.ControllerManager){
		"AddSharded empty":           func(m *cm.ControllerManager) { m.AddSharded("", ctl) },
		"AddSharded slash":           func(m *cm.ControllerManager) { m.AddSharded("a/b", ctl) },
		"AddSharded newline":         func(m *cm.ControllerManager) { m.AddSharded("a\nb", ctl) },
		"AddShardedGroup empty":      func(m *cm.ControllerManager) { m.AddShardedGroup("", cm.SupervisionSpec{}, grp) },
		"AddShardedGroup slash":      func(m *cm.ControllerManager) { m.AddShardedGroup("a/b", cm.SupervisionSpec{}, grp) },
		"AddShardedGroup whitespace": func(m *cm.ControllerManager) { m.AddShardedGroup(" ", cm.SupervisionSpec{}, grp) },
	} {
		t.Run(name, func(t *testing.T) {
			m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				m.ShutdownAndWait(ctx)
			})
			add(m)
			err = m.Start(context.Background(), 5*time.Second)
			require.Error(t, err)
			require.True(t, errors.Is(err, cm.ErrInvalidName), "%v", err)
		})
	}
}
