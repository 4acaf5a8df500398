package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// orphanParentEnv, set to a directory for the child's log, makes this test binary act as
// the parent in TestProcessDiesWithParent.
const orphanParentEnv = "CLUSTER_TEST_ORPHAN_PARENT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(orphanParentEnv); dir != "" {
		runOrphanParent(dir)
		return
	}
	// These tests start only sh and sleep, never a control plane, so they need neither
	// Guard nor the binaries.
	goleak.VerifyTestMain(m)
}

// runOrphanParent starts a long sleep the way the harness starts etcd, prints its pid
// and blocks until it is killed.
func runOrphanParent(logDir string) {
	p, err := startProcess("sleep", "sleep", []string{"600"}, nil, filepath.Join(logDir, "sleep.log"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(p.Pid())
	select {}
}

func startShell(t *testing.T, script string) *Process {
	t.Helper()
	p, err := startProcess("sh", "sh", []string{"-c", script}, nil, filepath.Join(t.TempDir(), "sh.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

// waitLog polls p's log until it contains want, failing t after a deadline.
func waitLog(t *testing.T, p *Process, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := os.ReadFile(p.LogPath())
		if strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never appeared in %s; have %q", want, p.LogPath(), out)
		}
		select {
		case <-p.Done():
			t.Fatalf("%s exited before printing %q: %v", p.Name(), want, p.ExitErr())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestProcessStopIsCleanAfterSIGTERM(t *testing.T) {
	p := startShell(t, `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	waitLog(t, p, "ready")
	require.NoError(t, p.Stop(10*time.Second))
	require.NoError(t, p.Stop(time.Second), "a second Stop returns the first one's result")
}

func TestProcessStopAcceptsDeathBySIGTERM(t *testing.T) {
	p, err := startProcess("sleep", "sleep", []string{"600"}, nil, filepath.Join(t.TempDir(), "sleep.log"))
	require.NoError(t, err)
	require.NoError(t, p.Stop(10*time.Second))
	require.True(t, exitedBy(p.ExitErr(), syscall.SIGTERM))
}

func TestProcessStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	p := startShell(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	waitLog(t, p, "ready")
	err := p.Stop(200 * time.Millisecond)
	require.ErrorContains(t, err, "did not stop within 200ms of SIGTERM and was killed")
	require.True(t, exitedBy(p.ExitErr(), syscall.SIGKILL))
}

func TestProcessStopReportsAnEarlierCrash(t *testing.T) {
	p := startShell(t, `echo boom; exit 3`)
	<-p.Done()
	err := p.Stop(time.Second)
	require.ErrorContains(t, err, "sh exited before it was stopped: exit status 3")
	require.ErrorContains(t, err, "boom", "the error carries the log's tail")
}

func TestProcessKillThenStopIsNil(t *testing.T) {
	p := startShell(t, `sleep 600`)
	require.NoError(t, p.Kill())
	require.True(t, exitedBy(p.ExitErr(), syscall.SIGKILL))
	require.NoError(t, p.Stop(time.Second))
}

// TestProcessDiesWithParent checks the guarantee the package rests on when go test's
// timeout or a SIGKILL ends a test binary: the children die with it.
func TestProcessDiesWithParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), orphanParentEnv+"="+t.TempDir())
	stdout, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "parent said %q", line)
	require.True(t, alive(child), "the child must run while its parent does")

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for alive(child) {
		select {
		case <-deadline:
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("child %d outlived its killed parent", child)
		case <-tick.C:
		}
	}
}

// alive reports whether pid runs; a zombie (killed, not yet reaped by whichever process
// inherited it) counts as dead.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func TestLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	tests := []struct {
		name, content, want string
		n                   int
	}{
		{"fewer lines than asked", "a\nb\n", "a\nb", 3},
		{"exactly n", "a\nb\nc\n", "b\nc", 2},
		{"no trailing newline", "a\nb\nc", "c", 1},
		{"empty", "", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path, []byte(tt.content), 0o600))
			require.Equal(t, tt.want, lastLines(path, tt.n))
		})
	}
	require.Empty(t, lastLines(filepath.Join(t.TempDir(), "missing"), 3))
}
