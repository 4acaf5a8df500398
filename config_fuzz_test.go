package controllermanager_test

import (
	"testing"
)

// FuzzConfig decodes arbitrary JSON into a ControllerManagerConfigSpec, as
// a host reading its config file does, and builds a manager from it with an
// arbitrary default lease name: nothing panics, a manager that was built
// shuts down cleanly, and every problem NewControllerManager reports names
// the field at fault. CI runs it for a bounded time (make unit); the seed
// corpus is below and in testdata/fuzz/FuzzConfig.
func FuzzConfig(f *testing.F) {
	for _, seed := range []struct{ doc, lease string }{
		{`{}`, ""},
		{`{"supervision":{"strategy":"AllForOne","maxRestarts":3,"restartWindow":"30s","initialBackoff":"50ms","maxBackoff":"5s",` +
			`"healthInterval":"5s","healthTimeout":"500ms","unhealthyThreshold":2,"shutdownTimeout":"10s"}}`, ""},
		{`{"leaderElection":{"enabled":true,"leaseName":"jobs","leaseNamespace":"ops","leaseDuration":"30s",` +
			`"renewDeadline":"15s","retryPeriod":"5s","onLeaseLost":"Reelect"}}`, "default-lease"},
		{`{"leaderElection":{"enabled":true}}`, "from-the-default"},
		{`{"supervision":{"maxRestarts":-1,"restartWindow":"-1s"},"leaderElection":{"enabled":true,"leaseName":"X"}}`, ""},
		{`{"leaderElection":{"enabled":true,"leaseDuration":"3s","renewDeadline":"2s","retryPeriod":"500ms"}}`, "fast"},
	} {
		f.Add([]byte(seed.doc), seed.lease)
	}
	f.Fuzz(func(t *testing.T, doc []byte, defaultLease string) {
		decodeErr, err := newFromJSON(t, string(doc), defaultLease)
		if decodeErr != nil || err == nil {
			return
		}
		assertEveryLineNamesAField(t, err)
	})
}
