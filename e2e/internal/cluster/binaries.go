package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// AssetsEnv names the variable that points at the directory holding etcd and
// kube-apiserver; controller-runtime's envtest reads the same one.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// binariesScript builds the binaries and prints their directory on its last line; its
// path is relative to the repository root.
const binariesScript = "hack/e2e-binaries.sh"

var (
	defaultBinDirOnce sync.Once
	defaultBinDir     string
	defaultBinDirErr  error
)

// binDir returns explicit when it is set, else $KUBEBUILDER_ASSETS, else the directory
// that hack/e2e-binaries.sh prints, running the script once per test binary. It checks
// that both binaries are there.
func binDir(explicit string) (string, error) {
	dir := explicit
	if dir == "" {
		defaultBinDirOnce.Do(func() { defaultBinDir, defaultBinDirErr = resolveDefaultBinDir() })
		if defaultBinDirErr != nil {
			return "", defaultBinDirErr
		}
		dir = defaultBinDir
	}
	var errs []error
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("missing %s binary: %w", name, err))
		}
	}
	return dir, errors.Join(errs...)
}

func resolveDefaultBinDir() (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		return dir, nil
	}
	script, err := findUp(binariesScript)
	if err != nil {
		return "", fmt.Errorf("%s is unset and %w", AssetsEnv, err)
	}
	fmt.Fprintf(os.Stderr, "e2e: %s is unset: building etcd and kube-apiserver with %s "+
		"(a cold build takes several minutes; later runs reuse the binaries)\n", AssetsEnv, script)
	var stdout bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", fmt.Errorf("%s printed no directory", script)
	}
	return dir, nil
}

// findUp looks for rel in the working directory (a test's is its package directory) and
// each of its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, rel)
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s found above the working directory", rel)
		}
		dir = parent
	}
}
