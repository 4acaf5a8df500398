package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// FleetSpec.Supervision is every member's group's spec: an invalid one
// fails Start naming "<fleet>/provider", not each member's AddChild later.
func TestFleetSpecSupervisionIsValidated(t *testing.T) {
	for name, c := range map[string]struct {
		sup  cm.SupervisionSpec
		want []string
	}{
		"strategy":      {cm.SupervisionSpec{Strategy: "Bogus"}, []string{"Bogus"}},
		"maxRestarts":   {cm.SupervisionSpec{MaxRestarts: -1}, []string{"maxRestarts"}},
		"onExhausted":   {cm.SupervisionSpec{OnExhausted: "Never"}, []string{"supervision.onExhausted", "Never"}},
		"negative back": {cm.SupervisionSpec{MaxBackoff: metav1.Duration{Duration: -time.Second}}, []string{"maxBackoff must not be negative"}},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			fleet := cm.NewFleet("fleet", newHandProvider(nil), newBuilds().build, cm.FleetSpec{Supervision: c.sup})
			mgr, _ := fleetManager(t, clk, fleet)
			err := mgr.Start(context.Background(), 0)
			require.Error(t, err)
			require.ErrorContains(t, err, "fleet/provider")
			for _, want := range c.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

// A ProbeTimeout under 50ms, set or defaulted from a short ProbePeriod, is
// shorter than an API server's round trip: every member would stay Offline.
func TestFleetSpecProbeTimeoutMinimum(t *testing.T) {
	ms := func(n int) metav1.Duration { return metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
	for name, c := range map[string]struct {
		spec cm.FleetSpec
		ok   bool
	}{
		"probeTimeout 10ms":                {cm.FleetSpec{ProbeTimeout: ms(10)}, false},
		"probePeriod 1ns, timeout from it": {cm.FleetSpec{ProbePeriod: metav1.Duration{Duration: 1}}, false},
		"probeTimeout 49ms":                {cm.FleetSpec{ProbePeriod: ms(100), ProbeTimeout: ms(49)}, false},
		"probeTimeout 50ms":                {cm.FleetSpec{ProbePeriod: ms(100), ProbeTimeout: ms(50)}, true},
		"examples/fleet, statespace 100ms": {cm.FleetSpec{ProbePeriod: ms(100), ProbeTimeout: ms(100)}, true},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			fleet := cm.NewFleet("fleet", newHandProvider(nil), newBuilds().build, c.spec)
			mgr, _ := fleetManager(t, clk, fleet)
			err := mgr.Start(context.Background(), 0)
			if c.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorContains(t, err, "fleet/provider")
			require.ErrorContains(t, err, "probeTimeout")
			require.ErrorContains(t, err, "at least 50ms")
		})
	}
}
