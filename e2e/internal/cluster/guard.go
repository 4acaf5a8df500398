package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// live holds what this test binary has started and not yet stopped, for Guard's signal
// handler: helper programs, stopped first since they are the control plane's clients,
// then whole clusters, each stopping its kube-apiserver before its etcd.
var live = &registry{programs: map[*Process]struct{}{}, clusters: map[*Cluster]struct{}{}}

type registry struct {
	mu       sync.Mutex
	programs map[*Process]struct{}
	clusters map[*Cluster]struct{}
}

func (r *registry) addProgram(p *Process)    { r.mu.Lock(); r.programs[p] = struct{}{}; r.mu.Unlock() }
func (r *registry) removeProgram(p *Process) { r.mu.Lock(); delete(r.programs, p); r.mu.Unlock() }
func (r *registry) addCluster(c *Cluster)    { r.mu.Lock(); r.clusters[c] = struct{}{}; r.mu.Unlock() }
func (r *registry) removeCluster(c *Cluster) { r.mu.Lock(); delete(r.clusters, c); r.mu.Unlock() }

// stopAll stops every live program, then every live cluster, each group in parallel.
func (r *registry) stopAll(timeout time.Duration) {
	r.mu.Lock()
	programs := make([]*Process, 0, len(r.programs))
	for p := range r.programs {
		programs = append(programs, p)
	}
	clusters := make([]*Cluster, 0, len(r.clusters))
	for c := range r.clusters {
		clusters = append(clusters, c)
	}
	r.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range programs {
		wg.Go(func() { _ = p.Stop(timeout) })
	}
	wg.Wait()
	for _, c := range clusters {
		wg.Go(func() { _ = c.Stop() })
	}
	wg.Wait()
}

// Runner is what goleak.VerifyTestMain takes: a *testing.M or a wrapper of one.
type Runner interface{ Run() int }

// Guard wraps a test binary's *testing.M for TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(cluster.Guard(m)) }
//
// Its Run first makes sure the binaries exist (building them with hack/e2e-binaries.sh
// when $KUBEBUILDER_ASSETS is unset), before m.Run starts go test's -timeout clock, so a
// cold build does not eat the tests' time; if that fails, no test runs and Run returns 1.
// While the tests run, SIGINT and SIGTERM stop every process this package started and
// remove their directories, then end the binary by the same signal.
func Guard(m *testing.M) Runner { return &guard{m: m} }

type guard struct{ m *testing.M }

// signalStopTimeout bounds how long the signal handler waits for each helper program to
// stop; clusters take their Options.StopTimeout.
const signalStopTimeout = 10 * time.Second

func (g *guard) Run() int {
	if _, err := binDir(""); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	removeOrphanedDirs()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	finished := make(chan struct{})
	handlerDone := make(chan struct{})
	go func() {
		defer close(handlerDone)
		select {
		case <-finished:
		case sig := <-signals:
			fmt.Fprintf(os.Stderr, "e2e: %v: stopping every etcd, kube-apiserver and helper program\n", sig)
			live.stopAll(signalStopTimeout)
			signal.Reset(sig)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		}
	}()

	code := g.m.Run()
	signal.Stop(signals)
	close(finished)
	<-handlerDone
	return code
}

// dirPrefix starts the name of every cluster's directory in $TMPDIR; the test binary's
// pid follows it, then a dash.
const dirPrefix = "actorkube-e2e-"

// removeOrphanedDirs removes the cluster directories of test binaries that no longer run:
// a binary killed outright (go test's -timeout) takes its processes with it but leaves
// their directories behind.
func removeOrphanedDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*-*"))
	for _, dir := range matches {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), dirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// processExists reports whether a process with this pid exists (signal 0 checks without
// sending anything; EPERM means it exists but belongs to someone else).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
