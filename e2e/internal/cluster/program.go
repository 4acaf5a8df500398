package cluster

import (
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"testing"
	"time"
)

// programStopTimeout is how long a helper program may take to exit after SIGTERM in
// t.Cleanup before it is killed.
const programStopTimeout = 30 * time.Second

// BuildProgram compiles the main package pkg (an import path such as
// "github.com/actorkube/controllermanager/e2e/internal/cmd/kubeping", or a path relative to
// the test's package directory such as "./testdata/prog") into t.TempDir() and returns the
// binary's path. It builds with -race when the test binary itself was built with it.
func BuildProgram(t testing.TB, pkg string) string {
	t.Helper()
	out, err := Build(pkg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Build is BuildProgram into dir, for a binary that outlives one test: build it once per
// test binary and remove dir when the tests are done.
func Build(pkg, dir string) (string, error) {
	out := filepath.Join(dir, path.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return out, nil
}

// StartProgram starts the binary at bin as an OS process of its own, with args and env
// (KEY=value, added to the test binary's environment; pass the cluster's credentials here
// or in args, e.g. "KUBECONFIG="+c.Kubeconfig()). Its output goes to a log file in
// t.TempDir(), which Process.LogPath names and which is shown if t fails. t.Cleanup stops
// it: SIGTERM, then SIGKILL after 30s. A program that has already exited by then is not
// an error: the test owns its outcome through Done and ExitErr.
func StartProgram(t testing.TB, bin string, args, env []string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	p, err := startProcess(filepath.Base(bin), bin, args, env, logPath)
	if err != nil {
		t.Fatal(err)
	}
	live.addProgram(p)
	t.Cleanup(func() {
		defer live.removeProgram(p)
		select {
		case <-p.Done():
		default:
			if err := p.Stop(programStopTimeout); err != nil {
				t.Errorf("failed to stop %s: %v", p.name, err)
			}
		}
		if t.Failed() {
			t.Logf("%s (pid %d) output:%s", p.name, p.Pid(), p.logTail())
		}
	})
	return p
}
