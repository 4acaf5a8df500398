package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// The election timing of every scenario: short, so that the suite is quick, and valid
// (the lease in whole seconds, lease > renew + retry, renew > 1.2 × retry). The fence
// budget is LeaseDuration − RenewDeadline − RetryPeriod = 1.5s, the fence timeout 1.2s.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
	// retryJitter is client-go's: a standby retries every RetryPeriod to 2.2 × RetryPeriod.
	retryJitter = 1.2
)

// maxRetryGap is the longest a standby waits between two attempts to acquire.
const maxRetryGap = time.Duration((1 + retryJitter) * float64(retryPeriod))

// controllers are the names of the replica program's controllers.
var controllers = []string{"reconciler-a", "reconciler-b", "configmaps"}

// replicaPkg is the program every replica runs.
const replicaPkg = "github.com/actorkube/controllermanager/e2e/internal/cmd/replica"

var replicaBuild struct {
	once sync.Once
	dir  string // made by TestMain, removed after the tests
	path string
	err  error
}

// replicaBinary builds the replica program once per test binary.
func replicaBinary(t *testing.T) string {
	t.Helper()
	replicaBuild.once.Do(func() {
		started := time.Now()
		replicaBuild.path, replicaBuild.err = cluster.Build(replicaPkg, replicaBuild.dir)
		t.Logf("built the replica program in %s", time.Since(started).Round(time.Millisecond))
	})
	if replicaBuild.err != nil {
		t.Fatal(replicaBuild.err)
	}
	return replicaBuild.path
}

// scenario is one test's control plane, namespace and replicas of one Lease.
type scenario struct {
	t         *testing.T
	cluster   *cluster.Cluster
	namespace string
	leaseName string
	bin       string
	dir       string // the replicas' journals

	replicas []*replica
}

// newScenario starts a control plane and creates a namespace for the test.
func newScenario(t *testing.T) *scenario {
	t.Helper()
	bin := replicaBinary(t)
	dir := t.TempDir() // first, so that it is removed after the journals are shown
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	s := &scenario{t: t, cluster: c, namespace: ns.Name, leaseName: "controllers", bin: bin, dir: dir}
	s.dumpJournalsOnFailure()
	return s
}

// replica is one replica program, running as an OS process of its own.
type replica struct {
	id      string
	proc    *cluster.Process
	journal string // path of its journal

	killedAt time.Time // when it was SIGKILLed and reaped; zero otherwise
}

// start starts a replica with identity id; extra flags override the defaults.
func (s *scenario) start(id string, extra ...string) *replica {
	s.t.Helper()
	r := &replica{id: id, journal: filepath.Join(s.dir, id+".jsonl")}
	args := append([]string{
		"--kubeconfig=" + s.cluster.Kubeconfig(),
		"--lease-namespace=" + s.namespace,
		"--lease-name=" + s.leaseName,
		"--identity=" + id,
		"--lease-duration=" + leaseDuration.String(),
		"--renew-deadline=" + renewDeadline.String(),
		"--retry-period=" + retryPeriod.String(),
		"--journal=" + r.journal,
	}, extra...)
	r.proc = cluster.StartProgram(s.t, s.bin, args, nil)
	s.replicas = append(s.replicas, r)
	return r
}

// entries reads the replica's journal.
func (r *replica) entries(t *testing.T) []journal.Entry {
	t.Helper()
	entries, err := journal.ReadFile(r.journal)
	require.NoError(t, err)
	return entries
}

// kill SIGKILLs the replica, as a node failure would, and waits until it is reaped; its
// open intervals end then.
func (r *replica) kill(t *testing.T) time.Time {
	t.Helper()
	sent := time.Now()
	require.NoError(t, r.proc.Kill())
	r.killedAt = time.Now()
	return sent
}

// stamp formats times in failure messages.
const stamp = "15:04:05.000000"

// pollInterval is how often a test reads the journals it waits on. The figures come
// from the journals' own timestamps, so it only delays the test, not what it measures.
const pollInterval = 20 * time.Millisecond

// waitFor reads the journals of rs until cond, given them in the order of rs, returns
// true, and fails t after timeout. It fails at once if one of rs exits, unless it was
// expected to (killed, or mayExit).
func waitFor(t *testing.T, what string, timeout time.Duration, rs []*replica, cond func([][]journal.Entry) bool) [][]journal.Entry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		all := make([][]journal.Entry, len(rs))
		for i, r := range rs {
			all[i] = r.entries(t)
		}
		if cond(all) {
			return all
		}
		for i, r := range rs {
			select {
			case <-r.proc.Done():
				if r.killedAt.IsZero() && !exited(all[i]) {
					t.Fatalf("waiting for %s: replica %s exited unexpectedly: %v", what, r.id, r.proc.ExitErr())
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s; journals:\n%s", what, timeout, describe(rs, all))
		}
		<-tick.C
	}
}

func exited(entries []journal.Entry) bool {
	return slices.ContainsFunc(entries, func(e journal.Entry) bool { return e.Kind == journal.Exit })
}

// describe renders journals for a failure message.
func describe(rs []*replica, all [][]journal.Entry) string {
	var b strings.Builder
	for i, r := range rs {
		fmt.Fprintf(&b, "--- %s\n", r.id)
		for _, e := range all[i] {
			shard := ""
			if e.Kind == journal.ShardHolder || strings.HasPrefix(e.Type, "Shard") {
				shard = fmt.Sprintf(" shard %d ", e.Shard)
			}
			fmt.Fprintf(&b, "%s %s %s%s%s%s%s%s\n", e.At().Format(stamp), e.Kind,
				e.Controller, e.Type, shard, e.Phase, e.Leader, e.Err)
		}
	}
	return b.String()
}

// controllerState is where one controller stands in a journal.
type controllerState struct {
	kind journal.Kind // the last of RunCalled, Running, ShutdownCalled, Stopped; "" before any
	at   time.Time
}

// controllerStates returns the state of each controller at the end of entries.
func controllerStates(entries []journal.Entry) map[string]controllerState {
	states := map[string]controllerState{}
	for _, e := range entries {
		switch e.Kind {
		case journal.RunCalled, journal.Running, journal.ShutdownCalled, journal.Stopped:
			states[e.Controller] = controllerState{kind: e.Kind, at: e.At()}
		}
	}
	return states
}

// allRunningSince reports whether every controller is running at the end of entries,
// and since when all have been (the last one's Running).
func allRunningSince(entries []journal.Entry) (time.Time, bool) {
	states := controllerStates(entries)
	var since time.Time
	for _, name := range controllers {
		st := states[name]
		if st.kind != journal.Running {
			return time.Time{}, false
		}
		if st.at.After(since) {
			since = st.at
		}
	}
	return since, true
}

// allStoppedSince reports whether every controller that ever ran has stopped at the end
// of entries, and since when (the last one's Stopped).
func allStoppedSince(entries []journal.Entry) (time.Time, bool) {
	var since time.Time
	for _, st := range controllerStates(entries) {
		if st.kind != journal.Stopped {
			return time.Time{}, false
		}
		if st.at.After(since) {
			since = st.at
		}
	}
	return since, true
}

// firstAfter returns the first entry at or after since that match accepts.
func firstAfter(entries []journal.Entry, since time.Time, match func(journal.Entry) bool) (journal.Entry, bool) {
	for _, e := range entries {
		if !e.At().Before(since) && match(e) {
			return e, true
		}
	}
	return journal.Entry{}, false
}

func supervision(typ string) func(journal.Entry) bool {
	return func(e journal.Entry) bool { return e.Kind == journal.Supervision && e.Type == typ }
}

// waitLeader waits until exactly one of rs runs all its controllers and every other
// live one has observed it as the holder, and returns it.
func waitLeader(t *testing.T, what string, timeout time.Duration, rs []*replica) *replica {
	t.Helper()
	var leader *replica
	waitFor(t, what, timeout, rs, func(all [][]journal.Entry) bool {
		leader = nil
		for i, r := range rs {
			if _, ok := allRunningSince(all[i]); ok {
				if leader != nil {
					t.Fatalf("%s and %s both run their controllers:\n%s", leader.id, r.id, describe(rs, all))
				}
				leader = rs[i]
			}
		}
		if leader == nil {
			return false
		}
		for i, r := range rs {
			if r.killedAt.IsZero() && !exited(all[i]) && lastLeader(all[i]) != leader.id {
				return false
			}
		}
		return true
	})
	return leader
}

// lastLeader is the holder a replica observed last.
func lastLeader(entries []journal.Entry) string {
	holder := ""
	for _, e := range entries {
		if e.Kind == journal.Leader {
			holder = e.Leader
		}
	}
	return holder
}

// stopAll stops every replica still running with SIGTERM and checks that each exits 0.
func (s *scenario) stopAll() {
	s.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(s.replicas))
	for i, r := range s.replicas {
		if !r.killedAt.IsZero() {
			continue
		}
		select {
		case <-r.proc.Done():
			continue
		default:
		}
		wg.Go(func() { errs[i] = r.proc.Stop(30 * time.Second) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(s.t, err, "replica %s", s.replicas[i].id)
	}
}

// sendSignal sends sig to a process, failing t if it cannot.
func sendSignal(t *testing.T, p *cluster.Process, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.Signal(sig))
}

// dumpJournalsOnFailure shows every replica's journal when t fails.
func (s *scenario) dumpJournalsOnFailure() {
	s.t.Cleanup(func() {
		if !s.t.Failed() {
			return
		}
		all := make([][]journal.Entry, len(s.replicas))
		for i, r := range s.replicas {
			all[i], _ = journal.ReadFile(r.journal)
		}
		s.t.Logf("journals:\n%s", describe(s.replicas, all))
	})
}
