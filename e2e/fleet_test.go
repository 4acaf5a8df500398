package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/cluster"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// fleetShards is the number of shards of the fleet scenario.
const fleetShards = 2

// The fleet on real API servers (issue 36): a hub kube-apiserver holds the shard
// Leases and the members' kubeconfig Secrets; two member kube-apiservers, each with
// its own etcd; two replica processes run the fleet (--fleet-label), each member's
// writer patching its ConfigMap default/stamp through the Cluster's guarded Config.
//
//   - A member's API server SIGSTOPped: only its subtree goes Offline, within the
//     failure threshold plus a probe period (and the time to stop it), while the
//     other member is written on; SIGCONT: it comes back.
//   - A kubeconfig rotated: that member's subtree restarts once. A Secret deleted:
//     that member is disengaged, its writer stops.
//   - The replica running the remaining member SIGKILLed: the member runs on the
//     other replica.
//   - Throughout, one member's writer is never active on two replicas at once, and
//     every write that reached a member came from a writer while it ran.
func TestFleetOnMemberAPIServers(t *testing.T) {
	s := newScenario(t)
	hub := s.cluster.Clientset()
	members := map[string]*cluster.Cluster{}
	names := []string{"prod", "stage"}
	for _, name := range names {
		m := cluster.Start(t, cluster.Options{})
		members[name] = m
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := m.Clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stamp"}}, metav1.CreateOptions{})
		cancel()
		require.NoError(t, err)
		kubeconfig, err := os.ReadFile(m.Kubeconfig())
		require.NoError(t, err)
		ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
		_, err = hub.CoreV1().Secrets(s.namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Labels: map[string]string{"e2e-fleet": "member"}},
			Data:       map[string][]byte{"value": kubeconfig},
		}, metav1.CreateOptions{})
		cancel()
		require.NoError(t, err)
	}
	flags := []string{fmt.Sprintf("--shards=%d", fleetShards), "--fleet-label=e2e-fleet=member", "--on-lease-lost=Reelect"}
	a, b := s.start("a", flags...), s.start("b", flags...)
	rs := []*replica{a, b}
	defer s.stopAll()

	// Each member written by exactly one replica, the two on different replicas once
	// the shards are spread (the names hash to different shards).
	require.NotEqual(t, cm.ShardOf("prod", fleetShards), cm.ShardOf("stage", fleetShards))
	var runner map[string]*replica
	waitFor(t, "each member written by one replica, the shards spread", 90*time.Second, rs, func(all [][]journal.Entry) bool {
		runner = map[string]*replica{}
		for _, name := range names {
			for i, r := range rs {
				if writerActive(all[i], name) && wroteSince(all[i], name, time.Time{}) {
					runner[name] = r
				}
			}
			if runner[name] == nil {
				return false
			}
		}
		return runner["prod"] != runner["stage"]
	})
	t.Logf("prod on %s, stage on %s", runner["prod"].id, runner["stage"].id)

	// prod's API server frozen: prod Offline on its replica; stage written on.
	frozenAt := time.Now()
	sendSignal(t, members["prod"].APIServer(), syscall.SIGSTOP)
	thawed := false
	defer func() {
		if !thawed {
			sendSignal(t, members["prod"].APIServer(), syscall.SIGCONT)
		}
	}()
	all := waitFor(t, "prod Offline", 60*time.Second, rs, func(all [][]journal.Entry) bool {
		_, ok := fleetEventAfter(all, "ClusterOffline", "prod", frozenAt)
		return ok
	})
	off, _ := fleetEventAfter(all, "ClusterOffline", "prod", frozenAt)
	// The bound: the threshold, plus a period before the first failing probe, plus
	// the probe timeout (a frozen server does not refuse: each probe waits it out).
	t.Logf("FIGURE prod Offline %v after its API server was frozen (failure threshold %v, probe period %v, probe timeout %v)",
		off.At().Sub(frozenAt).Round(time.Millisecond), 2*time.Second, 500*time.Millisecond, 400*time.Millisecond)
	waitFor(t, "prod's writer stopped and stage written after prod went Offline", 30*time.Second, rs, func(all [][]journal.Entry) bool {
		for i := range rs {
			if writerActive(all[i], "prod") {
				return false
			}
		}
		return wroteSince(all[indexOf(rs, runner["stage"])], "stage", off.At())
	})
	_, northOffline := fleetEventAfter(all, "ClusterOffline", "stage", frozenAt)
	require.False(t, northOffline, "stage stays Online")

	thawedAt := time.Now()
	sendSignal(t, members["prod"].APIServer(), syscall.SIGCONT)
	thawed = true
	all = waitFor(t, "prod Online and written again", 60*time.Second, rs, func(all [][]journal.Entry) bool {
		_, ok := fleetEventAfter(all, "ClusterOnline", "prod", thawedAt)
		if !ok {
			return false
		}
		for i := range rs {
			if wroteSince(all[i], "prod", thawedAt) {
				return true
			}
		}
		return false
	})
	on, _ := fleetEventAfter(all, "ClusterOnline", "prod", thawedAt)
	t.Logf("FIGURE prod Online %v after its API server was thawed (success threshold %v)", on.At().Sub(thawedAt).Round(time.Millisecond), time.Second)

	// prod's kubeconfig rotated (the same API server, named by "localhost", which its
	// certificate names too): prod is engaged again and its subtree restarts once.
	kubeconfig, err := os.ReadFile(members["prod"].Kubeconfig())
	require.NoError(t, err)
	rotated := strings.ReplaceAll(string(kubeconfig), "https://127.0.0.1:", "https://localhost:")
	require.NotEqual(t, string(kubeconfig), rotated, "the kubeconfig names 127.0.0.1")
	rotatedAt := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	secret, err := hub.CoreV1().Secrets(s.namespace).Get(ctx, "prod-kubeconfig", metav1.GetOptions{})
	require.NoError(t, err)
	secret.Data["value"] = []byte(rotated)
	_, err = hub.CoreV1().Secrets(s.namespace).Update(ctx, secret, metav1.UpdateOptions{})
	cancel()
	require.NoError(t, err)
	waitFor(t, "prod restarted on its new kubeconfig and written", 60*time.Second, rs, func(all [][]journal.Entry) bool {
		for i := range rs {
			if runsSince(all[i], "prod", rotatedAt) > 0 && wroteSince(all[i], "prod", rotatedAt) {
				return true
			}
		}
		return false
	})

	// stage's Secret deleted: stage disengaged, its writer stopped.
	deletedAt := time.Now()
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	require.NoError(t, hub.CoreV1().Secrets(s.namespace).Delete(ctx, "stage-kubeconfig", metav1.DeleteOptions{}))
	cancel()
	all = waitFor(t, "stage disengaged", 60*time.Second, rs, func(all [][]journal.Entry) bool {
		if _, ok := fleetEventAfter(all, "ClusterDisengaged", "stage", deletedAt); !ok {
			return false
		}
		for i := range rs {
			if writerActive(all[i], "stage") {
				return false
			}
		}
		return true
	})
	gone, _ := fleetEventAfter(all, "ClusterDisengaged", "stage", deletedAt)
	t.Logf("FIGURE stage disengaged %v after its Secret was deleted", gone.At().Sub(deletedAt).Round(time.Millisecond))
	// By now (events later than the rotation), prod's subtree has restarted once.
	restarts := 0
	for i := range rs {
		restarts += runsSince(all[i], "prod", rotatedAt)
	}
	require.Equal(t, 1, restarts, "prod's writer ran once on its rotated kubeconfig")

	// The replica running prod SIGKILLed: prod runs on the other.
	var holder, other *replica
	waitFor(t, "prod running on one replica", 30*time.Second, rs, func(all [][]journal.Entry) bool {
		for i, r := range rs {
			if writerActive(all[i], "prod") {
				holder, other = r, rs[1-i]
				return true
			}
		}
		return false
	})
	killedAt := holder.kill(t)
	waitFor(t, "prod written by the other replica", 60*time.Second, []*replica{other}, func(all [][]journal.Entry) bool {
		return writerActive(all[0], "prod") && wroteSince(all[0], "prod", killedAt)
	})
	t.Logf("FIGURE prod written by %s %v after %s was SIGKILLed (lease duration %v)",
		other.id, firstWriteAfter(other.entries(t), "prod", killedAt).Sub(killedAt).Round(time.Millisecond), holder.id, leaseDuration)

	// One member's writer never active on two replicas at once, and every write that
	// reached a member came from a writer while it ran.
	checkShardsNoOverlapBy(t, rs, nil, func(controller string) int {
		return cm.ShardOf(strings.TrimPrefix(controller, "stamp-"), fleetShards)
	})
	for _, r := range rs {
		_, wide := intervals(r, r.entries(t))
		for _, e := range r.entries(t) {
			if e.Kind != journal.Write || e.Err != "" {
				continue
			}
			inside := false
			for _, iv := range wide {
				if iv.controller == e.Controller && !e.At().Before(iv.from) && !e.At().After(iv.to) {
					inside = true
					break
				}
			}
			require.True(t, inside, "%s: a write of %s at %s outside its writer's run", r.id, e.Controller, e.At().Format(stamp))
		}
	}
}

// writerActive reports whether the journal's last word on member's writer is that it
// runs (Running after its last Shutdown call).
func writerActive(entries []journal.Entry, member string) bool {
	active := false
	for _, e := range entries {
		if e.Controller != "stamp-"+member {
			continue
		}
		switch e.Kind {
		case journal.Running:
			active = true
		case journal.ShutdownCalled, journal.Stopped:
			active = false
		}
	}
	return active
}

// runsSince counts the Run calls of member's writer after since.
func runsSince(entries []journal.Entry, member string, since time.Time) int {
	n := 0
	for _, e := range entries {
		if e.Kind == journal.RunCalled && e.Controller == "stamp-"+member && e.At().After(since) {
			n++
		}
	}
	return n
}

// wroteSince reports whether member's writer wrote successfully after since.
func wroteSince(entries []journal.Entry, member string, since time.Time) bool {
	return !firstWriteAfter(entries, member, since).IsZero()
}

func firstWriteAfter(entries []journal.Entry, member string, since time.Time) time.Time {
	for _, e := range entries {
		if e.Kind == journal.Write && e.Controller == "stamp-"+member && e.Err == "" && e.At().After(since) {
			return e.At()
		}
	}
	return time.Time{}
}

// fleetEventAfter finds, in any journal, the first event typ of member after since.
func fleetEventAfter(all [][]journal.Entry, typ, member string, since time.Time) (journal.Entry, bool) {
	for _, entries := range all {
		if e, ok := firstAfter(entries, since, func(e journal.Entry) bool {
			return e.Kind == journal.Supervision && e.Type == typ && e.Child == "fleet/"+member
		}); ok {
			return e, true
		}
	}
	return journal.Entry{}, false
}

func indexOf(rs []*replica, r *replica) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}
