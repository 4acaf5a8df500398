package controllermanager_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// A lifecycle message sent without waiting for its answer (Send) that
// the supervisor refuses is logged, naming what was refused and why:
// nobody else hears the refusal. Before stop 62 it was dropped without a
// word, unless the facade itself refused it.
func TestSendRefusedIsLogged(t *testing.T) {
	var logs syncBuffer
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	m.Add(testchild.NewController("ctrl", testchild.Behavior{}))
	require.NoError(t, m.Start(context.Background(), 0))
	t.Cleanup(func() { m.ShutdownAndWait(context.Background()) })

	m.Send(supervisor.StartChild{Name: "nope"})
	m.Send(supervisor.StartChild{Name: "ctrl"}) // running already
	// The mailbox is FIFO: once the Status asked after them is answered,
	// both have been taken, and their refusals logged.
	_, err = m.Status(context.Background())
	require.NoError(t, err)
	var refused []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "a lifecycle message was refused") {
			refused = append(refused, line)
		}
	}
	require.Len(t, refused, 2, logs.String())
	require.Contains(t, refused[0], "nope")
	require.Contains(t, refused[1], `StartChild \"ctrl\"`)
	require.Contains(t, refused[1], supervisor.ErrAlreadyRunning.Error())
}
