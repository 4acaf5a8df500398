package controllermanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Lease's namespace defaults to $POD_NAMESPACE, else the service
// account's namespace file, else "default".
func TestElectionLeaseNamespaceDefault(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "namespace")
	saved := serviceAccountNamespaceFile
	serviceAccountNamespaceFile = file
	t.Cleanup(func() { serviceAccountNamespaceFile = saved })
	yes := true
	namespace := func() string {
		t.Helper()
		c, err := (&LeaderElectionSpec{Enabled: &yes}).election("lease")
		if err != nil {
			t.Fatal(err)
		}
		return c.namespace
	}

	t.Setenv("POD_NAMESPACE", "")
	if have := namespace(); have != "default" {
		t.Errorf("no env, no file: want default, have %q", have)
	}
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if have := namespace(); have != "from-file" {
		t.Errorf("file: want from-file, have %q", have)
	}
	t.Setenv("POD_NAMESPACE", "from-env")
	if have := namespace(); have != "from-env" {
		t.Errorf("env and file: want from-env, have %q", have)
	}
	c, err := (&LeaderElectionSpec{Enabled: &yes, LeaseNamespace: "explicit"}).election("lease")
	if err != nil || c.namespace != "explicit" {
		t.Errorf("explicit: want explicit, have %q (%v)", c.namespace, err)
	}
	t.Setenv("POD_NAMESPACE", "Not_Valid")
	_, err = (&LeaderElectionSpec{Enabled: &yes}).election("lease")
	if want := `leaderElection.leaseNamespace: "Not_Valid" (from $POD_NAMESPACE) is not a valid namespace`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an invalid namespace from the environment: want %q, have %v", want, err)
	}
}
