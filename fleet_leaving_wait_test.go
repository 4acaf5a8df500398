package controllermanager_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// processCPU is the CPU time the test process has used so far.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The fleet's runner is removed alone (RemoveChild of "fleet/provider"):
// its members leave, and their groups are removed one by one, each as long
// as its Shutdown takes (bounded by ShutdownTimeout on the manager's
// clock, here held). An engage of a leaving member's name meanwhile (the
// ended provider's, which is refused once the member has left) waits for
// the member's ClusterDisengaged without burning a CPU. Before, it spun on
// the fleet's lock for as long as the removal ran.
func TestFleetEngageOfALeavingMemberWaitsWithoutSpinning(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	prov := newHandProvider(map[string]*rest.Config{"a": a.config()})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	spec := fleetSpec()
	spec.Supervision.ShutdownTimeout = metav1.Duration{Duration: time.Hour} // on clk, which is not stepped
	fleet := cm.NewFleet("fleet", prov, func(cm.Cluster) []cm.Runnable {
		return []cm.Runnable{&hangingCtrl{release: release}}
	}, spec)
	mgr, log := fleetManager(t, clk, fleet)
	t.Cleanup(free)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, mgr.RemoveChild(ctx, "fleet/provider"))
	// The member's group is being removed, held by its Shutdown.
	pollUntil(t, 20*time.Second, func() string {
		if cs, ok := fleetChild(t, mgr, "fleet/a/hung"); ok && cs.State == "Stopping" {
			return ""
		}
		return "fleet/a/hung not Stopping yet"
	})

	engaged := make(chan error, 1)
	go func() { engaged <- prov.Engage(t, "a", a.config()) }()
	// Give the engage a moment of wall time to reach the member, then
	// measure what the process burns while it waits.
	window := 500 * time.Millisecond
	before := processCPU(t)
	timer := time.NewTimer(window)
	select {
	case err := <-engaged:
		t.Fatalf("the engage returned (%v) while the member's removal is held", err)
	case <-timer.C:
	}
	used := processCPU(t) - before
	t.Logf("CPU used in %s while the engage waited: %s", window, used)
	require.Less(t, used, window/2, "the engage spun while the member was leaving")

	free()
	select {
	case err := <-engaged:
		require.Error(t, err, "the ended provider's engage is refused")
	case <-ctx.Done():
		t.Fatal("the engage did not return once the member had left")
	}
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
}
