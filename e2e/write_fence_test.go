package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// fencedConfigMap is the ConfigMap the replicas' writers patch.
const fencedConfigMap = "fenced"

// writeFenceRounds is how many SIGSTOP rounds TestWriteFenceWhileLeaderPaused runs:
// $E2E_WRITE_FENCE_ROUNDS, else 3 (about ten seconds a round and mode). The figures in
// docs/leader-election.md come from 20.
func writeFenceRounds(t *testing.T) int {
	if s := os.Getenv("E2E_WRITE_FENCE_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "E2E_WRITE_FENCE_ROUNDS")
		require.Positive(t, n, "E2E_WRITE_FENCE_ROUNDS")
		return n
	}
	return 3
}

// TestWriteFenceWhileLeaderPaused freezes the leader itself (SIGSTOP) past its lease,
// while its writer controller patches a ConfigMap every 20ms, and resumes it (SIGCONT)
// once another replica holds the Lease and writes. The paused leader's goroutines all
// resume at once, its writer's before its elector can notice the loss: only a check at
// the write can stop it. The order of every committed write against the Lease comes
// from resourceVersions (one etcd orders them all): a write committed by a replica
// while the Lease version in force (the last one with a smaller resourceVersion) names
// another holder is a write by a non-holder.
//
// "guarded": the writers' clientsets are fenced with GuardTransport: no such write may
// be committed. "unguarded": the same without the guard, reported beside it, not
// failed: it shows what the guard closes.
func TestWriteFenceWhileLeaderPaused(t *testing.T) {
	rounds := writeFenceRounds(t)
	for _, mode := range []struct {
		name    string
		guarded bool
	}{{"guarded", true}, {"unguarded", false}} {
		t.Run(mode.name, func(t *testing.T) {
			res := runWriteFence(t, mode.guarded, rounds)
			t.Logf("%s: %d rounds, %d writes committed, %d by a non-holder (in %d rounds), %d refused by the guard",
				mode.name, rounds, res.committed, res.byNonHolder, res.roundsWithNonHolder, res.refused)
			if mode.guarded {
				for _, d := range res.resumeToRefusal {
					figure(t, "write fence: SIGCONT → first write refused", d, "")
				}
				require.Zero(t, res.byNonHolder, "writes committed by a replica while the Lease named another holder")
			}
		})
	}
}

type writeFenceResult struct {
	committed, byNonHolder, roundsWithNonHolder, refused int
	resumeToRefusal                                      []time.Duration
	// Per round: SIGSTOP → the other replica's first committed write (the
	// handover, as the writes see it), and the whole round.
	handovers, roundTimes []time.Duration
}

// runWriteFence runs rounds SIGSTOP rounds on a fresh control plane.
func runWriteFence(t *testing.T, guarded bool, rounds int) writeFenceResult {
	return runWriteFenceVia(t, guarded, rounds, nil)
}

// runWriteFenceVia is runWriteFence whose replicas reach the API server through
// proxied's kubeconfig, when proxied is not nil (the soak's slow Lease writes: it is
// given the scenario and starts the proxy); the test's own watches always go to the
// API server directly.
func runWriteFenceVia(t *testing.T, guarded bool, rounds int, proxied func(*scenario) string) writeFenceResult {
	s := newScenario(t)
	client := s.cluster.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	_, err := client.CoreV1().ConfigMaps(s.namespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fencedConfigMap},
	}, metav1.CreateOptions{})
	cancel()
	require.NoError(t, err)
	leases := watchLease(t, client, s.namespace, s.leaseName)
	writes := watchWrites(t, client, s.namespace, fencedConfigMap)

	flags := []string{"--on-lease-lost=Reelect", "--writer-configmap=" + fencedConfigMap,
		"--writer-guard=" + strconv.FormatBool(guarded), "--writer-every=20ms"}
	if proxied != nil {
		flags = append(flags, "--kubeconfig="+proxied(s))
	}
	rs := []*replica{s.start("replica-a", flags...), s.start("replica-b", flags...)}
	// Resumed last, so that no stopped replica outlives the test.
	t.Cleanup(func() {
		for _, r := range rs {
			_ = r.proc.Signal(syscall.SIGCONT)
		}
	})
	leader := waitLeader(t, "a first leader", startupTimeout, rs)

	var res writeFenceResult
	for round := range rounds {
		other := rs[0]
		if other == leader {
			other = rs[1]
		}
		began := time.Now()
		// The leader is writing.
		writes.waitFor(t, leader.id+" writing", func(ws []committedWrite) bool {
			return len(ws) > 0 && ws[len(ws)-1].writer == leader.id
		})
		paused := time.Now()
		sendSignal(t, leader.proc, syscall.SIGSTOP)
		// Frozen past the lease, until the other replica holds it and has written.
		writes.waitFor(t, other.id+" writing after "+leader.id+" was paused", func(ws []committedWrite) bool {
			return len(ws) > 0 && ws[len(ws)-1].writer == other.id
		})
		resumed := time.Now()
		res.handovers = append(res.handovers, firstWriteBy(writes.snapshot(), other.id, paused).Sub(paused))
		sendSignal(t, leader.proc, syscall.SIGCONT)
		t.Logf("round %d: %s paused for %s", round+1, leader.id, resumed.Sub(paused).Round(time.Millisecond))
		// The woken leader fences: its elector reports the loss and its controllers,
		// the writer among them, stop.
		waitFor(t, leader.id+" fenced after the resume", leaseDuration+activationSlack, []*replica{leader}, func(all [][]journal.Entry) bool {
			_, lost := firstAfter(all[0], resumed, supervision("LeaderLost"))
			_, stopped := allStoppedSince(all[0])
			return lost && stopped
		})
		if guarded {
			refusal, ok := firstAfter(leader.entries(t), resumed, func(e journal.Entry) bool {
				return e.Kind == journal.Write && strings.Contains(e.Err, "refused by the lease guard")
			})
			if ok {
				res.resumeToRefusal = append(res.resumeToRefusal, refusal.At().Sub(resumed))
			}
		}
		before := res.byNonHolder
		res.byNonHolder += len(nonHolderWrites(t, writes.snapshot(), leases.snapshot(), paused))
		if res.byNonHolder > before {
			res.roundsWithNonHolder++
		}
		waitLeader(t, "the next leader", startupTimeout, rs)
		res.roundTimes = append(res.roundTimes, time.Since(began))
		leader = other
	}
	// No checkNoOverlap here: a frozen leader's controllers count as active until it
	// resumes and fences, beside the new leader's; what matters is what they wrote.
	s.stopAll()

	bad := nonHolderWrites(t, writes.snapshot(), leases.snapshot(), time.Time{})
	res.byNonHolder = len(bad)
	for _, w := range bad {
		for _, r := range rs {
			for _, e := range r.entries(t) {
				if e.Kind == journal.Write && strings.HasPrefix(e.Message, "seq "+w.seq+" ") && r.id == w.writer {
					t.Logf("  %s journal: %s %s %s", r.id, e.At().Format(stamp), e.Message, e.Err)
				}
			}
		}
	}
	res.committed = len(writes.snapshot())
	for _, r := range rs {
		for _, e := range r.entries(t) {
			if e.Kind == journal.Write && strings.Contains(e.Err, "refused by the lease guard") {
				res.refused++
			}
		}
	}
	return res
}

// committedWrite is one version of the fenced ConfigMap.
type committedWrite struct {
	resourceVersion uint64
	writer          string
	seq             string
	seen            time.Time // when the test's watch received it
}

// writeWatch records every version of one ConfigMap, from a watch that resumes where
// it broke off.
type writeWatch struct {
	mu     sync.Mutex
	writes []committedWrite
}

func watchWrites(t *testing.T, client kubernetes.Interface, namespace, name string) *writeWatch {
	w := &writeWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, client, namespace, name)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *writeWatch) run(ctx context.Context, client kubernetes.Interface, namespace, name string) {
	cms := client.CoreV1().ConfigMaps(namespace)
	resourceVersion := ""
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for ctx.Err() == nil {
		watcher, err := cms.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: resourceVersion,
		})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
			continue
		}
		for ev := range watcher.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				cm := ev.Object.(*corev1.ConfigMap)
				resourceVersion = cm.ResourceVersion
				w.add(cm)
			case watch.Error:
				resourceVersion = ""
			}
		}
		watcher.Stop()
	}
}

func (w *writeWatch) add(cm *corev1.ConfigMap) {
	rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
	if err != nil || cm.Data["writer"] == "" {
		return // the test's own create
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.writes); n > 0 && w.writes[n-1].resourceVersion >= rv {
		return // seen already, before a resumed watch
	}
	w.writes = append(w.writes, committedWrite{resourceVersion: rv, writer: cm.Data["writer"], seq: cm.Data["seq"], seen: time.Now()})
}

func (w *writeWatch) snapshot() []committedWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]committedWrite(nil), w.writes...)
}

// waitFor polls the versions seen until cond holds.
func (w *writeWatch) waitFor(t *testing.T, what string, cond func([]committedWrite) bool) {
	t.Helper()
	require.Eventually(t, func() bool { return cond(w.snapshot()) },
		leaseDuration+2*maxRetryGap+startupTimeout, pollInterval, "not seen: %s", what)
}

// firstWriteBy is when the test's watch saw writer's first write after since; since
// itself if there is none.
func firstWriteBy(writes []committedWrite, writer string, since time.Time) time.Time {
	for _, w := range writes {
		if w.writer == writer && w.seen.After(since) {
			return w.seen
		}
	}
	return since
}

// nonHolderWrites returns the writes since since committed while the Lease version in
// force (the last with a smaller resourceVersion) named another holder than the writer.
func nonHolderWrites(t *testing.T, writes []committedWrite, leases []leaseRecord, since time.Time) []committedWrite {
	t.Helper()
	type version struct {
		rv     uint64
		holder string
	}
	vs := make([]version, 0, len(leases))
	for _, l := range leases {
		rv, err := strconv.ParseUint(l.resourceVersion, 10, 64)
		require.NoError(t, err)
		vs = append(vs, version{rv, l.holder})
	}
	var bad []committedWrite
	for _, w := range writes {
		if w.seen.Before(since) {
			continue
		}
		holder := ""
		for _, v := range vs {
			if v.rv < w.resourceVersion {
				holder = v.holder
			}
		}
		if holder != w.writer {
			t.Logf("write rv %d (seq %s) by %s, seen %s, committed while the Lease named %q; Lease versions around it:",
				w.resourceVersion, w.seq, w.writer, w.seen.Format(stamp), holder)
			for i, v := range vs {
				if v.rv+40 > w.resourceVersion && v.rv < w.resourceVersion+40 {
					t.Logf("  lease rv %d holder %q renewed %s acquired %s", v.rv, v.holder, leases[i].renewed.Format(stamp), leases[i].acquired.Format(stamp))
				}
			}
			bad = append(bad, w)
		}
	}
	return bad
}
