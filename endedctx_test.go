package controllermanager_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// Issue 34 §5: AddChild, RemoveChild and Request on a context that has
// ended already return its error and do nothing. Before, the message was
// sent all the same: the child was added, removed or restarted after the
// call had returned the context's error.
func TestLifecycleCallsOnAnEndedContextDoNothing(t *testing.T) {
	victim := testchild.NewController("victim", testchild.Behavior{})
	c := testchild.NewController("c", testchild.Behavior{})
	late := testchild.NewController("late", testchild.Behavior{})
	m := newManager(t, nil, nil)
	m.Add(victim, c)
	gStart(t, m)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.AddChild(ended, late), context.Canceled)
	require.ErrorIs(t, m.RemoveChild(ended, "victim"), context.Canceled)
	for _, msg := range []any{
		supervisor.RestartChild{Name: "c"},
		supervisor.StopChild{Name: "c"},
		supervisor.AddChild{Name: "late2", Runnable: testchild.NewRunnable(nil)},
		supervisor.RemoveChild{Name: "c"},
	} {
		_, err := m.Request(ended, msg)
		require.ErrorIs(t, err, context.Canceled, "%#v", msg)
	}

	// Whatever had been sent would have been handled before these, which
	// take the same mailbox and the same naming path.
	require.NoError(t, m.AddChild(gCtx(t), testchild.NewController("probe", testchild.Behavior{})))
	st := mustStatus(t, m)
	var names []string
	for _, ch := range st.Children {
		names = append(names, ch.Name)
		assert.Equal(t, supervisor.StateRunning, ch.State, ch.Name)
	}
	assert.ElementsMatch(t, []string{"victim", "c", "probe"}, names)
	for _, ctrl := range []*testchild.Controller{victim, c, late} {
		runs, shutdowns, _ := ctrl.Counts()
		assert.Zero(t, shutdowns, ctrl.Name())
		if ctrl == late {
			assert.Zero(t, runs, "late never ran")
		} else {
			assert.Equal(t, 1, runs, ctrl.Name())
		}
	}
}
