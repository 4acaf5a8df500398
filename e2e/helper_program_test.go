package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
)

// TestHelperProgramReachesAPIServer proves what the replica scenarios build on: a program
// built from this module runs as its own OS process, reaches the apiserver with the
// harness's kubeconfig, and stops cleanly on SIGTERM.
func TestHelperProgramReachesAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	bin := cluster.BuildProgram(t, "github.com/actorkube/controllermanager/e2e/internal/cmd/kubeping")

	p := cluster.StartProgram(t, bin, []string{"--hold"}, []string{"KUBECONFIG=" + c.Kubeconfig()})

	// Poll the log with a deadline, giving up at once if the program exits instead.
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		out, _ := os.ReadFile(p.LogPath())
		if strings.Contains(string(out), "server v1.37.2\n") {
			break
		}
		select {
		case <-p.Done():
			t.Fatalf("kubeping exited before printing the server version: %v", p.ExitErr())
		case <-deadline:
			t.Fatal("kubeping did not print the server version within 30s")
		case <-tick.C:
		}
	}
	require.NoError(t, p.Stop(10*time.Second))
	require.NoError(t, p.ExitErr())
}
