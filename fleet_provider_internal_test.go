package controllermanager

import (
	"testing"
	"time"
)

// Each watch of the kubeconfig Secrets asks for a TimeoutSeconds in
// [5m, 10m), whole seconds, as client-go's reflector does.
func TestFleetSecretWatchTimeoutRange(t *testing.T) {
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := secretWatchTimeout()
		if d < 5*time.Minute || d >= 10*time.Minute || d%time.Second != 0 {
			t.Fatalf("secretWatchTimeout() = %s, want whole seconds in [5m, 10m)", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < time.Minute {
		t.Errorf("2000 timeouts within %s..%s: not spread over [5m, 10m)", lo, hi)
	}
}
