package controllermanager_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/supervisor"
)

// fieldRef matches the name of a ControllerManagerConfigSpec field in an
// error: every problem NewControllerManager reports names one.
var fieldRef = regexp.MustCompile(`\b(supervision|leaderElection)\.[a-zA-Z]+\b|leaseDuration`)

// newFromJSON decodes doc into a spec as a host would, then builds a
// manager from it (with a fake clientset, so that election can be on); a
// manager that was built is shut down at once.
func newFromJSON(t testing.TB, doc, defaultLease string) (decodeErr, newErr error) {
	var spec cm.ControllerManagerConfigSpec
	if err := json.Unmarshal([]byte(doc), &spec); err != nil {
		return err, nil
	}
	m, err := cm.NewControllerManager(cm.NewContext(fake.NewClientset()), spec, defaultLease, quiet)
	if err != nil {
		if m != nil {
			t.Errorf("NewControllerManager returned a manager and an error: %v", err)
		}
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m.ShutdownAndWait(ctx)
	if err := m.Err(); err != nil {
		t.Errorf("a manager that never started stopped with %v", err)
	}
	return nil, nil
}

// TestConfigFromJSON puts every field of ControllerManagerConfigSpec at its
// edges (negative, zero, huge, malformed, invalid names) through JSON
// decoding and NewControllerManager: each is either accepted, or refused
// with an error that names the field.
func TestConfigFromJSON(t *testing.T) {
	const le = `"enabled":true,"leaseName":"jobs"`
	tests := []struct {
		name string
		doc  string
		// wantDecode: json.Unmarshal fails, with these in its message.
		wantDecode []string
		// want: NewControllerManager fails, naming these; neither: accepted.
		want []string
	}{
		{name: "empty document", doc: `{}`},
		{name: "null document", doc: `null`},
		{name: "not an object", doc: `[]`, wantDecode: []string{"cannot unmarshal array"}},
		{name: "null sections", doc: `{"supervision":null,"leaderElection":null}`},

		{name: "strategy OneForOne", doc: `{"supervision":{"strategy":"OneForOne"}}`},
		{name: "strategy AllForOne", doc: `{"supervision":{"strategy":"AllForOne"}}`},
		{name: "strategy RestForOne", doc: `{"supervision":{"strategy":"RestForOne"}}`},
		{name: "strategy in the wrong case", doc: `{"supervision":{"strategy":"oneforone"}}`, want: []string{"supervision.strategy", `"oneforone"`}},
		{name: "strategy not a string", doc: `{"supervision":{"strategy":1}}`, wantDecode: []string{"supervision.strategy"}},
		{name: "onExhausted Stop", doc: `{"supervision":{"onExhausted":"Stop"}}`},
		{name: "onExhausted Escalate", doc: `{"supervision":{"onExhausted":"Escalate"}}`},
		{name: "onExhausted unknown", doc: `{"supervision":{"onExhausted":"Restart"}}`, want: []string{"supervision.onExhausted", `"Restart"`}},

		{name: "maxRestarts negative", doc: `{"supervision":{"maxRestarts":-1}}`, want: []string{"supervision.maxRestarts", "-1"}},
		{name: "maxRestarts zero is the default", doc: `{"supervision":{"maxRestarts":0}}`},
		{name: "maxRestarts largest", doc: `{"supervision":{"maxRestarts":2147483647}}`},
		{name: "maxRestarts past int32", doc: `{"supervision":{"maxRestarts":2147483648}}`, wantDecode: []string{"supervision.maxRestarts"}},
		{name: "maxRestarts fractional", doc: `{"supervision":{"maxRestarts":1.5}}`, wantDecode: []string{"supervision.maxRestarts"}},
		{name: "maxRestarts a string", doc: `{"supervision":{"maxRestarts":"5"}}`, wantDecode: []string{"supervision.maxRestarts"}},
		{name: "unhealthyThreshold negative", doc: `{"supervision":{"unhealthyThreshold":-2147483648}}`, want: []string{"supervision.unhealthyThreshold"}},
		{name: "unhealthyThreshold largest", doc: `{"supervision":{"unhealthyThreshold":2147483647}}`},

		{name: "restartWindow negative", doc: `{"supervision":{"restartWindow":"-1s"}}`, want: []string{"supervision.restartWindow", "-1s"}},
		{name: "restartWindow zero", doc: `{"supervision":{"restartWindow":"0s"}}`},
		{name: "restartWindow largest", doc: `{"supervision":{"restartWindow":"2562047h47m16.854775807s"}}`},
		{name: "restartWindow past int64", doc: `{"supervision":{"restartWindow":"2562048h"}}`, wantDecode: []string{"invalid duration"}},
		{name: "restartWindow malformed", doc: `{"supervision":{"restartWindow":"1x"}}`, wantDecode: []string{`unknown unit "x"`}},
		{name: "restartWindow a number", doc: `{"supervision":{"restartWindow":60}}`, wantDecode: []string{"supervision.restartWindow"}},
		{name: "initialBackoff negative", doc: `{"supervision":{"initialBackoff":"-1ns"}}`, want: []string{"supervision.initialBackoff"}},
		{name: "initialBackoff past the default maxBackoff", doc: `{"supervision":{"initialBackoff":"1h"}}`, want: []string{"supervision.initialBackoff", "supervision.maxBackoff"}},
		{name: "both backoffs largest", doc: `{"supervision":{"initialBackoff":"2562047h","maxBackoff":"2562047h"}}`},
		{name: "maxBackoff negative", doc: `{"supervision":{"maxBackoff":"-30s"}}`, want: []string{"supervision.maxBackoff"}},
		{name: "maxBackoff under initialBackoff", doc: `{"supervision":{"maxBackoff":"1ms"}}`, want: []string{"supervision.initialBackoff", "supervision.maxBackoff"}},
		{name: "healthInterval negative", doc: `{"supervision":{"healthInterval":"-10s"}}`, want: []string{"supervision.healthInterval"}},
		{name: "healthInterval largest", doc: `{"supervision":{"healthInterval":"2562047h"}}`},
		{name: "healthInterval tiny", doc: `{"supervision":{"healthInterval":"1ns"}}`, want: []string{"supervision.healthInterval", "at least 10ms"}},
		{name: "healthTimeout negative", doc: `{"supervision":{"healthTimeout":"-1s"}}`, want: []string{"supervision.healthTimeout"}},
		{name: "healthTimeout largest", doc: `{"supervision":{"healthTimeout":"2562047h"}}`},
		{name: "healthTimeout tiny", doc: `{"supervision":{"healthTimeout":"1ns"}}`, want: []string{"supervision.healthTimeout", "at least 1ms"}},
		{name: "shutdownTimeout negative", doc: `{"supervision":{"shutdownTimeout":"-1s"}}`, want: []string{"supervision.shutdownTimeout"}},
		{name: "shutdownTimeout largest", doc: `{"supervision":{"shutdownTimeout":"2562047h"}}`},
		{name: "every supervision problem at once",
			doc: `{"supervision":{"strategy":"x","maxRestarts":-1,"restartWindow":"-1s","initialBackoff":"-1s","maxBackoff":"-1s","healthInterval":"-1s","healthTimeout":"-1s","unhealthyThreshold":-1,"shutdownTimeout":"-1s"}}`,
			want: []string{"supervision.strategy", "supervision.maxRestarts", "supervision.restartWindow", "supervision.initialBackoff",
				"supervision.maxBackoff", "supervision.healthInterval", "supervision.healthTimeout", "supervision.unhealthyThreshold", "supervision.shutdownTimeout"}},

		{name: "election off ignores its other fields", doc: `{"leaderElection":{"enabled":false,"leaseName":"NOT A NAME","leaseDuration":"-1s"}}`},
		{name: "enabled not a bool", doc: `{"leaderElection":{"enabled":"yes"}}`, wantDecode: []string{"leaderElection.enabled"}},
		{name: "election with defaults", doc: `{"leaderElection":{` + le + `}}`},
		{name: "no lease name at all", doc: `{"leaderElection":{"enabled":true}}`, want: []string{"leaderElection.leaseName", "required"}},
		{name: "lease name in capitals", doc: `{"leaderElection":{"enabled":true,"leaseName":"Jobs"}}`, want: []string{"leaderElection.leaseName", `"Jobs"`}},
		{name: "lease name with spaces", doc: `{"leaderElection":{"enabled":true,"leaseName":"my lease"}}`, want: []string{"leaderElection.leaseName"}},
		{name: "lease name not ASCII", doc: `{"leaderElection":{"enabled":true,"leaseName":"bücher"}}`, want: []string{"leaderElection.leaseName"}},
		{name: "lease name too long", doc: `{"leaderElection":{"enabled":true,"leaseName":"` + strings.Repeat("a", 254) + `"}}`, want: []string{"leaderElection.leaseName"}},
		{name: "lease name longest", doc: `{"leaderElection":{"enabled":true,"leaseName":"` + strings.Repeat("a", 253) + `"}}`},
		{name: "lease namespace invalid", doc: `{"leaderElection":{` + le + `,"leaseNamespace":"Kube_System"}}`, want: []string{"leaderElection.leaseNamespace"}},
		{name: "lease namespace too long", doc: `{"leaderElection":{` + le + `,"leaseNamespace":"` + strings.Repeat("n", 64) + `"}}`, want: []string{"leaderElection.leaseNamespace"}},
		{name: "leaseDuration negative", doc: `{"leaderElection":{` + le + `,"leaseDuration":"-30s"}}`, want: []string{"leaderElection.leaseDuration"}},
		{name: "leaseDuration not whole seconds", doc: `{"leaderElection":{` + le + `,"leaseDuration":"30500ms"}}`, want: []string{"leaderElection.leaseDuration", "whole number of seconds"}},
		{name: "leaseDuration not above renewDeadline", doc: `{"leaderElection":{` + le + `,"leaseDuration":"15s"}}`, want: []string{"leaderElection.leaseDuration", "leaderElection.renewDeadline"}},
		{name: "leaseDuration leaves no time to fence", doc: `{"leaderElection":{` + le + `,"leaseDuration":"20s"}}`, want: []string{"leaderElection.leaseDuration", "fence"}},
		{name: "leaseDuration a day", doc: `{"leaderElection":{` + le + `,"leaseDuration":"24h"}}`},
		{name: "leaseDuration past what a Lease can hold", doc: `{"leaderElection":{` + le + `,"leaseDuration":"600000h"}}`,
			want: []string{"leaderElection.leaseDuration"}},
		{name: "leaseDuration huge", doc: `{"leaderElection":{` + le + `,"leaseDuration":"2000000h"}}`,
			want: []string{"leaderElection.leaseDuration"}},
		{name: "renewDeadline negative", doc: `{"leaderElection":{` + le + `,"renewDeadline":"-1s"}}`, want: []string{"leaderElection.renewDeadline"}},
		{name: "renewDeadline too close to retryPeriod", doc: `{"leaderElection":{` + le + `,"renewDeadline":"6s"}}`, want: []string{"leaderElection.renewDeadline", "1.2"}},
		{name: "retryPeriod negative", doc: `{"leaderElection":{` + le + `,"retryPeriod":"-5s"}}`, want: []string{"leaderElection.retryPeriod"}},
		{name: "retryPeriod huge", doc: `{"leaderElection":{` + le + `,"retryPeriod":"2562047h"}}`, want: []string{"leaderElection.leaseDuration", "leaderElection.renewDeadline"}},
		{name: "onLeaseLost Exit", doc: `{"leaderElection":{` + le + `,"onLeaseLost":"Exit"}}`},
		{name: "onLeaseLost Reelect", doc: `{"leaderElection":{` + le + `,"onLeaseLost":"Reelect"}}`},
		{name: "onLeaseLost unknown", doc: `{"leaderElection":{` + le + `,"onLeaseLost":"exit"}}`, want: []string{"leaderElection.onLeaseLost", `"exit"`}},
		{name: "every problem of both sections at once",
			doc:  `{"supervision":{"maxRestarts":-1},"leaderElection":{"enabled":true,"leaseName":"X","leaseNamespace":"Y","renewDeadline":"-1s","onLeaseLost":"?"}}`,
			want: []string{"supervision.maxRestarts", "leaderElection.leaseName", "leaderElection.leaseNamespace", "leaderElection.renewDeadline", "leaderElection.onLeaseLost"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			decodeErr, err := newFromJSON(t, tt.doc, "")
			if len(tt.wantDecode) > 0 {
				require.Error(t, decodeErr, "json.Unmarshal must refuse it")
				for _, s := range tt.wantDecode {
					assert.Contains(t, decodeErr.Error(), s)
				}
				return
			}
			require.NoError(t, decodeErr)
			if len(tt.want) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, s := range tt.want {
				assert.Contains(t, err.Error(), s)
			}
			assertEveryLineNamesAField(t, err)
		})
	}
}

// assertEveryLineNamesAField checks that each problem of a config error
// (one per line, errors.Join) names the field at fault.
func assertEveryLineNamesAField(t testing.TB, err error) {
	t.Helper()
	msg := strings.TrimPrefix(err.Error(), "controllermanager: invalid config: ")
	for line := range strings.SplitSeq(msg, "\n") {
		if !fieldRef.MatchString(line) {
			t.Errorf("a config error that names no field: %q (in %q)", line, err)
		}
	}
}

// TestLifecycleMessagesHostile sends every lifecycle message naming
// children that do not exist, with values that are not children, before
// Start and after the manager stopped: each is answered with a clear
// error, nothing panics, and the tree is left as it was.
func TestLifecycleMessagesHostile(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, nil, nil)
	c := testchild.NewController("c", testchild.Behavior{})
	m.Add(c)
	named := []any{
		supervisor.RestartChild{Name: "nope"}, supervisor.StopChild{Name: "nope"}, supervisor.StartChild{Name: "nope"},
		supervisor.RemoveChild{Name: "nope"}, supervisor.RestartChild{}, supervisor.StopChild{Name: strings.Repeat("x", 1<<16)},
	}

	for _, msg := range append(named, supervisor.RestartChild{Name: "c"}, supervisor.AddChild{Runnable: testchild.NewRunnable(nil), Name: "r"}) {
		_, err := m.Request(ctx, msg)
		assert.ErrorIs(t, err, supervisor.ErrNotRunning, "%T before Start", msg)
	}
	require.NoError(t, m.Start(ctx, 0))

	for _, msg := range named {
		_, err := m.Request(ctx, msg)
		require.ErrorIs(t, err, supervisor.ErrUnknownChild, "%#v", msg)
		assert.Less(t, len(err.Error()), 1<<17, "the error quotes the name once")
	}
	adds := []struct {
		msg  supervisor.AddChild
		want string
	}{
		{supervisor.AddChild{}, "child is nil"},
		{supervisor.AddChild{Runnable: 42}, "int is neither a Controller, a Webhook, a Store nor a Runnable"},
		{supervisor.AddChild{Runnable: testchild.NewRunnable(nil)}, "has no name"},
		{supervisor.AddChild{Runnable: testchild.NewController("c", testchild.Behavior{})}, `a child named "c" already exists`},
		{supervisor.AddChild{Name: "c", Runnable: testchild.NewRunnable(nil)}, `a child named "c" already exists`},
		{supervisor.AddChild{Runnable: nameless{health: func() cm.HealthStatus { panic("no name") }}}, "panic in GetHealth: no name"},
	}
	for _, tt := range adds {
		_, err := m.Request(ctx, tt.msg)
		require.Error(t, err, "%#v", tt.msg)
		assert.Contains(t, err.Error(), tt.want)
	}
	// Send, with no one to answer, must not break anything either.
	for _, msg := range append(named, supervisor.AddChild{}, supervisor.AddChild{Runnable: 42}) {
		m.Send(msg)
	}
	st := mustStatus(t, m)
	require.Len(t, st.Children, 1, "nothing added, nothing removed")
	assert.Equal(t, supervisor.StateRunning, st.Children[0].State)
	assert.Equal(t, cm.PhaseRunning, st.Phase)
	runs, shutdowns, _ := c.Counts()
	assert.Equal(t, []int{1, 0}, []int{runs, shutdowns}, "the real child was not touched")

	m.ShutdownAndWait(ctx)
	for _, msg := range append(named, supervisor.RestartChild{Name: "c"}, supervisor.StopChild{Name: "c"},
		supervisor.StartChild{Name: "c"}, supervisor.RemoveChild{Name: "c"}, supervisor.AddChild{Runnable: testchild.NewRunnable(nil), Name: "r"}) {
		_, err := m.Request(ctx, msg)
		assert.ErrorIs(t, err, supervisor.ErrStopped, "%T after shutdown", msg)
		m.Send(msg)
	}
	final, err := m.Request(ctx, supervisor.GetStatus{})
	require.NoError(t, err, "GetStatus after shutdown answers the final status")
	assert.Equal(t, cm.PhaseStopped, final.(cm.Status).Phase)
	assert.Equal(t, []int{1, 1}, func() []int { r, s, _ := c.Counts(); return []int{r, s} }())
}

// A request of a type the supervisor does not know (a pointer to a message,
// a typo, nil) is answered at once with an error naming the type.
func TestRequestOfUnknownTypeIsAnswered(t *testing.T) {
	m := newManager(t, nil, nil)
	require.NoError(t, m.Start(context.Background(), 0))
	for _, msg := range []any{"RestartChild", &supervisor.GetStatus{}, nil, struct{ Name string }{"c"}} {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := m.Request(ctx, msg)
		answered := ctx.Err() == nil
		cancel()
		assert.ErrorIs(t, err, supervisor.ErrUnknownMessage, "%#v", msg)
		assert.True(t, answered, "answered, not timed out")
	}
	assert.Equal(t, cm.PhaseRunning, mustStatus(t, m).Phase, "the supervisor is unharmed")
}

// TestStartAndShutdownRaces calls Start and ShutdownAndWait from many
// goroutines at once, on fresh managers and around each other: exactly one
// Start wins, the others get ErrStartTwice; every ShutdownAndWait returns
// and each child gets exactly one Shutdown.
func TestStartAndShutdownRaces(t *testing.T) {
	const callers = 8
	t.Run("Start twice at once", func(t *testing.T) {
		m := newManager(t, nil, nil)
		c := testchild.NewController("c", testchild.Behavior{})
		m.Add(c)
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() { errs <- m.Start(context.Background(), 0) })
		}
		wg.Wait()
		close(errs)
		var won int
		for err := range errs {
			if err == nil {
				won++
				continue
			}
			assert.ErrorIs(t, err, supervisor.ErrStartTwice)
		}
		assert.Equal(t, 1, won)
		runs, _, _ := c.Counts()
		assert.Equal(t, 1, runs)
	})
	t.Run("ShutdownAndWait from many goroutines", func(t *testing.T) {
		m := newManager(t, nil, nil)
		c := testchild.NewController("c", testchild.Behavior{})
		m.Add(c)
		require.NoError(t, m.Start(context.Background(), 0))
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() { m.ShutdownAndWait(context.Background()) })
		}
		wg.Wait()
		<-m.Done()
		assert.NoError(t, m.Err())
		runs, shutdowns, _ := c.Counts()
		assert.Equal(t, []int{1, 1}, []int{runs, shutdowns})
	})
	t.Run("ShutdownAndWait while Start runs", func(t *testing.T) {
		release := make(chan struct{})
		m := newManager(t, nil, nil)
		c := testchild.NewController("c", testchild.Behavior{Run: testchild.Block(release)})
		m.Add(c)
		started := make(chan error, 1)
		go func() { started <- m.Start(context.Background(), 0) }()
		require.True(t, testchild.Eventually(wait, func() bool { r, _, _ := c.Counts(); return r == 1 }))
		m.ShutdownAndWait(context.Background())
		err := <-started
		require.ErrorIs(t, err, supervisor.ErrShutdown, "Start ends with an error once the manager shuts down")
		close(release)
		runs, shutdowns, _ := c.Counts()
		assert.Equal(t, []int{1, 1}, []int{runs, shutdowns})
		assert.Error(t, m.Start(context.Background(), 0), "no Start after a shutdown")
	})
	t.Run("ShutdownAndWait with an ended context before Start", func(t *testing.T) {
		m := newManager(t, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		m.ShutdownAndWait(ctx) // returns at once; the manager still stops
		<-m.Done()
		assert.NoError(t, m.Err(), "nothing was running: nothing is reported unstopped")
		err := m.Start(context.Background(), 0)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "stopped", "Start after a shutdown says the manager stopped")
	})
	t.Run("Start twice on the other managers", func(t *testing.T) {
		w := cm.NewWebhookManager(cm.NewContext(nil), quiet)
		b := cm.NewBaseManager(cm.NewContext(nil), quiet)
		t.Cleanup(func() { w.ShutdownAndWait(context.Background()); b.ShutdownAndWait(context.Background()) })
		require.NoError(t, w.Start(context.Background()))
		require.ErrorIs(t, w.Start(context.Background()), supervisor.ErrStartTwice)
		require.NoError(t, b.Start(context.Background()))
		require.ErrorIs(t, b.Start(context.Background()), supervisor.ErrStartTwice)
	})
}

// TestAddHostile: nil values, duplicate names across Add and AddStore,
// and Add after Start, each reported, nothing started twice or lost.
func TestAddHostile(t *testing.T) {
	m := newManager(t, nil, nil)
	a := testchild.NewController("a", testchild.Behavior{})
	m.Add(a, nil, testchild.NewWebhook("a", "/a", nil, nil))
	m.AddStore(nil, testchild.NewStore("a", nil))
	m.Add(nil...)
	err := m.Start(context.Background(), 0)
	require.Error(t, err)
	for _, s := range []string{"child #1", "child #3", `#0 and #2 are both named "a"`, `#0 and #4 are both named "a"`} {
		assert.Contains(t, err.Error(), s)
	}
	runs, _, _ := a.Counts()
	assert.Zero(t, runs, "a start that cannot begin runs nothing")
	<-m.Done()
	assert.Error(t, m.Err())

	m2 := newManager(t, nil, nil)
	m2.Add(testchild.NewController("x", testchild.Behavior{}))
	require.NoError(t, m2.Start(context.Background(), 0))
	late := testchild.NewController("late", testchild.Behavior{})
	m2.Add(late)
	m2.AddStore(testchild.NewStore("late-store", nil))
	assert.Len(t, mustStatus(t, m2).Children, 1, "Add and AddStore after Start have no effect")
	require.NoError(t, m2.AddChild(context.Background(), late), "AddChild is how to add to a running manager")
	assert.Len(t, mustStatus(t, m2).Children, 2)
	err = m2.AddChild(context.Background(), late)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"late" already exists`)
	runs, _, _ = late.Counts()
	assert.Equal(t, 1, runs)
}
