package controllermanager_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// Issue 34 §4: a name is one segment of a path, neither empty nor blank,
// without "/", wherever it is given and whether or not groups exist; one
// sentinel, ErrInvalidName, refuses it, and the error quotes the name and
// where it was given. Before: a root child "p/q" passed Start when no group
// existed, a blank name inside a group passed as "g/", and a group's
// nested group "b/c" or a sharded "x/y-0" passed as well.
func TestStartRefusesBadNames(t *testing.T) {
	ctrl := func(name string) *testchild.Controller { return testchild.NewController(name, testchild.Behavior{}) }
	tests := []struct {
		name string
		add  func(m *cm.ControllerManager)
		want []string // in the error, beside ErrInvalidName
	}{{
		name: "slash at the root, no groups",
		add:  func(m *cm.ControllerManager) { m.Add(ctrl("p/q")) },
		want: []string{`"p/q"`, "at the root", `"/" is not allowed`},
	}, {
		name: "slash at the root beside the group it names",
		add: func(m *cm.ControllerManager) {
			m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, ctrl("x")), ctrl("g/evil"))
		},
		want: []string{`"g/evil"`, "at the root"},
	}, {
		name: "store with a slash",
		add:  func(m *cm.ControllerManager) { m.AddStore(testchild.NewStore("s/t", nil)) },
		want: []string{`store "s/t"`, "at the root"},
	}, {
		name: "empty name in a group",
		add:  func(m *cm.ControllerManager) { m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, ctrl(""))) },
		want: []string{`controller ""`, `in group "g"`, "empty name"},
	}, {
		name: "blank name in a nested group",
		add: func(m *cm.ControllerManager) {
			m.Add(cm.NewGroup("a", cm.SupervisionSpec{}, cm.NewGroup("b", cm.SupervisionSpec{}, ctrl("  "))))
		},
		want: []string{`controller "  "`, `in group "a/b"`, "blank name"},
	}, {
		name: "slash in a child of a group",
		add:  func(m *cm.ControllerManager) { m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, ctrl("x/y"))) },
		want: []string{`"x/y"`, `in group "g"`},
	}, {
		name: "group with a slash, nested",
		add: func(m *cm.ControllerManager) {
			m.Add(cm.NewGroup("a", cm.SupervisionSpec{}, cm.NewGroup("b/c", cm.SupervisionSpec{}, ctrl("x"))))
		},
		want: []string{`group "b/c"`, `in group "a"`},
	}, {
		name: "blank group",
		add:  func(m *cm.ControllerManager) { m.Add(cm.NewGroup(" ", cm.SupervisionSpec{}, ctrl("x"))) },
		want: []string{`group " "`, "at the root", "blank name"},
	}, {
		name: "sharded controller with a slash",
		add: func(m *cm.ControllerManager) {
			m.AddSharded("x/y", func(cm.Shard) cm.Controller { return ctrl("ignored") })
		},
		want: []string{`"x/y-0"`, "at the root"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, nil, nil)
			tt.add(m)
			err := m.Start(gCtx(t), 0)
			require.ErrorIs(t, err, cm.ErrInvalidName)
			require.ErrorIs(t, err, supervisor.ErrInvalidName)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// AddChild applies the same rule at any depth, whether the name comes from
// AddChild's Name or the child's own Name method, and a refused child
// leaves nothing behind. Before: a root child "g/evil" was filed inside
// group g, and one whose Name method returned "p/q" was taken at the root
// while AddChild{Name: "p/q"} was refused.
func TestAddChildRefusesBadNames(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, newGController(log, "g/x")))
	gStart(t, m)
	ctx := gCtx(t)
	bad := []struct {
		name string
		msg  supervisor.AddChild
		want string
	}{
		{"Name method with a slash", supervisor.AddChild{Runnable: testchild.NewController("p/q", testchild.Behavior{})}, `"p/q" at the root`},
		{"Name with a slash", supervisor.AddChild{Name: "p/q", Runnable: testchild.NewRunnable(nil)}, `"p/q" at the root`},
		{"root child inside an existing group's path", supervisor.AddChild{Runnable: testchild.NewController("g/evil", testchild.Behavior{})}, `"g/evil" at the root`},
		{"blank Name", supervisor.AddChild{Name: " ", Runnable: testchild.NewRunnable(nil)}, "blank name"},
		{"nameless child", supervisor.AddChild{Runnable: testchild.NewRunnable(nil)}, "has no name"},
		{"blank name in a group", supervisor.AddChild{Parent: "g", Runnable: testchild.NewController(" ", testchild.Behavior{})}, `in group "g"`},
		{"slash in a group", supervisor.AddChild{Parent: "g", Runnable: testchild.NewController("y/z", testchild.Behavior{})}, `"y/z" in group "g"`},
		{"group with a slash", supervisor.AddChild{Runnable: cm.NewGroup("h/i", cm.SupervisionSpec{})}, `group "h/i" at the root`},
		{"empty name inside a new group", supervisor.AddChild{Runnable: cm.NewGroup("h", cm.SupervisionSpec{}, testchild.NewController("", testchild.Behavior{}))}, `in group "h"`},
	}
	for _, tt := range bad {
		_, err := m.Request(ctx, tt.msg)
		require.ErrorIs(t, err, cm.ErrInvalidName, tt.name)
		assert.Contains(t, err.Error(), tt.want, tt.name)
	}
	// The typed call refuses the same.
	require.ErrorIs(t, m.AddChild(ctx, testchild.NewController("p/q", testchild.Behavior{})), cm.ErrInvalidName)

	st := mustStatus(t, m)
	require.Len(t, st.Children, 1, "nothing added: %+v", st.Children)
	g, ok := st.Child("g")
	require.True(t, ok)
	require.Len(t, g.Children, 1, "nothing filed inside g")
	assert.Equal(t, "g/x", g.Children[0].Name)
}

// A root child "g/x" and then a group g holding x collided: both were
// accepted, RestartChild("g/x") restarted the wrong child and
// ShutdownAndWait never completed. The first is refused now, and the
// group's x is the only "g/x".
func TestNoRootChildShadowsAGroupsPath(t *testing.T) {
	log := &gLog{}
	m := newManager(t, nil, gFast())
	gStart(t, m)
	ctx := gCtx(t)
	impostor := testchild.NewController("g/x", testchild.Behavior{})
	require.ErrorIs(t, m.AddChild(ctx, impostor), cm.ErrInvalidName)
	x := newGController(log, "g/x")
	require.NoError(t, m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{}, x)))
	require.ErrorIs(t, m.AddChild(ctx, cm.NewGroup("g", cm.SupervisionSpec{})), cm.ErrDuplicateChild)
	require.NoError(t, m.RestartChild(ctx, "g/x"))
	assert.Equal(t, 2, x.runCount(), "the group's x restarted")
	runs, _, _ := impostor.Counts()
	assert.Zero(t, runs)
	m.ShutdownAndWait(ctx)
	select {
	case <-m.Done():
	default:
		t.Fatal("ShutdownAndWait returned before the manager stopped")
	}
	require.NoError(t, m.Err())
}

// A start cut short by a concurrent stop has its own sentinel: StartChild
// waits for a Run that StopChild ends meanwhile. Before, the error
// ("supervisor: start interrupted by a stop") matched no exported
// sentinel.
func TestStartInterruptedByAStopHasASentinel(t *testing.T) {
	running := make(chan struct{}, 1)
	c := testchild.NewController("c", testchild.Behavior{Run: func(ctx context.Context, n int) error {
		if n == 1 {
			return nil
		}
		running <- struct{}{}
		<-ctx.Done() // honours its context: a stop ends it
		return ctx.Err()
	}})
	m := newManager(t, nil, gFast())
	m.Add(c)
	gStart(t, m)
	ctx := gCtx(t)
	require.NoError(t, m.StopChild(ctx, "c"))
	started := make(chan error, 1)
	go func() { started <- m.StartChild(ctx, "c") }()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the second Run did not begin")
	}
	require.NoError(t, m.StopChild(ctx, "c"))
	var err error
	select {
	case err = <-started:
	case <-ctx.Done():
		t.Fatal("StartChild did not return")
	}
	require.ErrorIs(t, err, cm.ErrStartInterrupted)
	require.ErrorIs(t, err, supervisor.ErrStartInterrupted)
	require.ErrorIs(t, err, cm.ErrChildStopped, "and which stop it was")
}

// A name with a control character is refused wherever it is given, with an
// error that says so. Before, Start took a controller named
// "jobs\n[+]cron ok\nhealthz check passed", and a user reading /healthz saw
// a passing check and a passing verdict of its making ahead of the real
// failure (the listing is one line per check).
func TestANameWithAControlCharacterIsRefused(t *testing.T) {
	forged := "jobs\n[+]cron ok\nhealthz check passed"
	m := newManager(t, nil, nil)
	m.Add(&probedCtrl{name: forged})
	err := m.Start(gCtx(t), 0)
	require.ErrorIs(t, err, cm.ErrInvalidName)
	assert.Contains(t, err.Error(), `controller "jobs\n[+]cron ok\nhealthz check passed" at the root`)
	assert.Contains(t, err.Error(), "a control character")

	m = newManager(t, nil, nil)
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, &probedCtrl{name: "tab\there"}))
	err = m.Start(gCtx(t), 0)
	require.ErrorIs(t, err, cm.ErrInvalidName)
	assert.Contains(t, err.Error(), `controller "tab\there" in group "g"`)

	m = newManager(t, nil, nil)
	m.Add(cm.NewGroup("g\x1b[0m", cm.SupervisionSpec{}, &probedCtrl{name: "x"}))
	require.ErrorIs(t, m.Start(gCtx(t), 0), cm.ErrInvalidName)

	m = newManager(t, nil, gFast())
	m.Add(cm.NewGroup("g", cm.SupervisionSpec{}, &probedCtrl{name: "x", healthy: true}))
	gStart(t, m)
	ctx := gCtx(t)
	for _, msg := range []supervisor.AddChild{
		{Runnable: &probedCtrl{name: forged}},
		{Name: "y\r", Runnable: testchild.NewRunnable(nil)},
		{Parent: "g", Runnable: &probedCtrl{name: "z\u0085"}},
	} {
		_, err := m.Request(ctx, msg)
		require.ErrorIs(t, err, cm.ErrInvalidName, "%q", msg.Name)
		assert.Contains(t, err.Error(), "a control character")
	}
	st := mustStatus(t, m)
	require.Len(t, st.Children, 1, "nothing added: %+v", st.Children)
	require.Len(t, st.Children[0].Children, 1, "nothing added to g: %+v", st.Children[0].Children)
}

// Two children of one name given to Add fail Start with an error that
// errors.Is matches as ErrDuplicateChild, as AddChild's does (a review in
// stop 64: Start's did not wrap it).
func TestStartRefusesDuplicateNamesAsErrDuplicateChild(t *testing.T) {
	m := newManager(t, nil, nil)
	ctrl := func(name string) *testchild.Controller { return testchild.NewController(name, testchild.Behavior{}) }
	m.Add(ctrl("a"), ctrl("b"), ctrl("a"))
	err := m.Start(gCtx(t), 0)
	require.ErrorIs(t, err, cm.ErrDuplicateChild)
	assert.Contains(t, err.Error(), `#0 and #2 are both named "a"`)
}
