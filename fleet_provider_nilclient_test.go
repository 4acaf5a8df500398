package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// KubeconfigSecrets(nil, …) fails Start naming "<fleet>/provider", not the
// provider's every run afterwards (each a supervised failure, restarted
// with backoff until the manager escalates).
func TestFleetKubeconfigSecretsNilClientRefused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	fleet := cm.NewFleet("fleet", cm.KubeconfigSecrets(nil, "ns", nil), newBuilds().build, cm.FleetSpec{})
	mgr, _ := fleetManager(t, clk, fleet)
	err := mgr.Start(context.Background(), 0)
	require.Error(t, err)
	require.ErrorContains(t, err, "fleet/provider")
	require.ErrorContains(t, err, "KubeconfigSecrets: nil client")
}
