package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// TestStandbySIGTERMExitsZero stops a standby replica the way a rolling update does, with
// SIGTERM while it waits for the lease another replica holds. The replica runs the
// manager with Serve, as the README says a host should: it must exit 0 (a standby that
// exits 1 on every rolling update pages someone for nothing), after Serve returned nil,
// without ever having run a controller.
func TestStandbySIGTERMExitsZero(t *testing.T) {
	s := newScenario(t)
	rs := []*replica{s.start("replica-a"), s.start("replica-b")}
	leader := waitLeader(t, "a leader, observed by the standby", startupTimeout, rs)
	standby := rs[0]
	if standby == leader {
		standby = rs[1]
	}

	require.NoError(t, standby.proc.Stop(30*time.Second), "%s must exit 0 after SIGTERM", standby.id)
	var served, exit *journal.Entry
	for _, e := range standby.entries(t) {
		switch e.Kind {
		case journal.RunCalled:
			t.Fatalf("the standby %s ran %s", standby.id, e.Controller)
		case journal.ShutdownReturned:
			served = &e
		case journal.Exit:
			exit = &e
		}
	}
	require.NotNil(t, served, "%s exited without Serve returning", standby.id)
	require.Empty(t, served.Err, "Serve's error on a standby stopped by SIGTERM")
	require.NotNil(t, exit, "%s did not journal its exit (killed by the signal?)", standby.id)
	require.Zero(t, exit.Code, "exit code: %s", exit.Err)

	s.stopAll()
	checkNoOverlap(t, rs)
}
