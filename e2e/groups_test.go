package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// The tenants of TestGroupsFailoverAfterSIGKILL, one group each in the replica
// program's --groups mode: "<tenant>/store" and "<tenant>/reconciler".
var groupTenants = []string{"tenant-a", "tenant-b", "tenant-c"}

const (
	// requestedTenant is stopped by request (StopChild) on the first leader.
	requestedTenant = "tenant-b"
	// crashingTenant's store crash-loops on the first leader only, so that its group
	// spends its budget and stops (ExhaustedStop).
	crashingTenant = "tenant-c"
	// groupBudget is the replica program's groupMaxRestarts: the restarts a tenant's
	// group allows a child before it stops.
	groupBudget = 3
)

// groupChildren are the paths of every tenant's children.
func groupChildren() []string {
	var paths []string
	for _, t := range groupTenants {
		paths = append(paths, t+"/store", t+"/reconciler")
	}
	return paths
}

// TestGroupsFailoverAfterSIGKILL: supervision trees across a failover (issue 27). Two
// replicas run a group per tenant. On the first leader, A, one tenant's store
// crash-loops until its group has spent its budget and stops (ExhaustedStop), and
// another tenant's group is stopped by request (StopChild); A's events, Status and
// metrics say so, and the third tenant runs on. A is SIGKILLed: the standby B takes
// the lease within client-go's bound and runs every group, both stopped ones included,
// fresh (first incarnations, nothing spent): the runtime keeps no supervision state
// outside the process but the Lease, so a new leader starts from its configuration.
// No child of any group is ever active on both replicas at once.
func TestGroupsFailoverAfterSIGKILL(t *testing.T) {
	s := newScenario(t)
	watch := watchLease(t, s.cluster.Clientset(), s.namespace, s.leaseName)
	flags := []string{"--groups=" + strings.Join(groupTenants, ","), "--metrics-addr=127.0.0.1:0"}

	// A alone, so that it leads: its crash loop and its stop by request play out.
	a := s.start("replica-a", append(flags, "--crash-store="+crashingTenant, "--stop-group="+requestedTenant)...)
	all := waitFor(t, "replica-a leading, "+requestedTenant+" stopped by request, "+crashingTenant+" on exhaustion",
		startupTimeout, []*replica{a}, func(all [][]journal.Entry) bool {
			g := lastGroupStates(all[0])
			return g[crashingTenant].Type == "Stopped" && g[crashingTenant].Message == journal.GroupExhausted &&
				g[requestedTenant].Type == "Stopped" && g["tenant-a"].Type == "Running"
		})
	aEntries := all[0]
	_, ok := firstAfter(aEntries, time.Time{}, supervision("LeaderElected"))
	require.True(t, ok, "replica-a runs its groups but was not elected")
	requireHolder(t, watch, a.id)

	// A's Status (journalled as it changed): the crashing tenant stopped on its spent
	// budget with its store's failure, the other by request, nothing spent.
	g := lastGroupStates(aEntries)
	assert.Equal(t, groupBudget, g[crashingTenant].Restarts, "%s: budget spent (GroupStatus.Spent)", crashingTenant)
	assert.Contains(t, g[crashingTenant].Err, "crashed", "%s: LastError", crashingTenant)
	assert.Empty(t, g[requestedTenant].Message, "%s was stopped by request, not on exhaustion", requestedTenant)
	assert.Zero(t, g[requestedTenant].Restarts)
	assert.Equal(t, "Running", g["tenant-a"].Type)
	stopReq, ok := firstAfter(aEntries, time.Time{}, func(e journal.Entry) bool { return e.Kind == journal.GroupStopRequested })
	require.True(t, ok)
	assert.Equal(t, requestedTenant, stopReq.Child)
	assert.Empty(t, stopReq.Err, "StopChild(%q)", requestedTenant)

	// A's events: the store failed once more than the budget allows restarts, the group
	// failed once and stopped; the requested stop is a ChildStopped with no failure.
	crashStore := crashingTenant + "/store"
	assert.Equal(t, groupBudget+1, countEvents(aEntries, "ChildFailed", crashStore))
	assert.Equal(t, groupBudget, countEvents(aEntries, "ChildRestarted", crashStore))
	assert.Equal(t, 1, countEvents(aEntries, "ChildFailed", crashingTenant))
	assert.Equal(t, 1, countEvents(aEntries, "ChildStopped", crashingTenant))
	assert.Equal(t, 1, countEvents(aEntries, "ChildStopped", requestedTenant))
	for _, c := range []string{requestedTenant, requestedTenant + "/store", requestedTenant + "/reconciler", "tenant-a", "tenant-a/store", "tenant-a/reconciler"} {
		assert.Zero(t, countEvents(aEntries, "ChildFailed", c), "ChildFailed of %s on replica-a", c)
	}
	// A's crash loop, from the store's first recovery to its group's stop.
	firstUp, _ := firstAfter(aEntries, time.Time{}, func(e journal.Entry) bool { return e.Kind == journal.Running && e.Controller == crashStore })
	groupStopped, _ := firstAfter(aEntries, time.Time{}, func(e journal.Entry) bool {
		return e.Kind == journal.Supervision && e.Type == "ChildStopped" && e.Child == crashingTenant
	})
	figure(t, "groups: crash loop, store up → group stopped", groupStopped.At().Sub(firstUp.At()),
		fmt.Sprintf("(%d restarts, backoff 20–100ms)", groupBudget))

	// A's metrics, scraped over HTTP: the groups' own samples and their
	// children's, by path. A group stopped on its spent budget is healthy (a
	// failing probe would restart the process) and exhausted.
	aMetrics := scrapeReplica(t, aEntries)
	assert.Equal(t, 1.0, metric(t, aMetrics, "controllermanager_child_failures_total", crashingTenant))
	assert.Equal(t, 1.0, metric(t, aMetrics, "controllermanager_child_healthy", crashingTenant))
	assert.Equal(t, 1.0, metric(t, aMetrics, "controllermanager_group_exhausted", crashingTenant))
	assert.Zero(t, metric(t, aMetrics, "controllermanager_group_exhausted", requestedTenant))
	assert.Equal(t, float64(groupBudget), metric(t, aMetrics, "controllermanager_child_restarts_total", crashStore))
	assert.Zero(t, metric(t, aMetrics, "controllermanager_child_failures_total", requestedTenant))
	assert.Equal(t, 1.0, metric(t, aMetrics, "controllermanager_child_healthy", "tenant-a"))

	// B, a standby that has observed A and runs none of the groups.
	b := s.start("replica-b", flags...)
	waitFor(t, "replica-b observing replica-a as the leader", startupTimeout, []*replica{a, b}, func(all [][]journal.Entry) bool {
		return lastLeader(all[1]) == a.id
	})
	require.Empty(t, controllerStates(b.entries(t)), "the standby started children")

	killed := a.kill(t)
	// client-go's worst case after a SIGKILL, as in TestFailoverAfterSIGKILL, then
	// every group's stores and controllers started.
	bound := leaseDuration + 2*maxRetryGap
	all = waitFor(t, "replica-b running every tenant's group", bound+activationSlack, []*replica{a, b}, func(all [][]journal.Entry) bool {
		_, ok := groupsRunningSince(all[1])
		g := lastGroupStates(all[1])
		for _, tenant := range groupTenants {
			if g[tenant].Type != "Running" {
				return false
			}
		}
		return ok
	})
	bEntries := all[1]
	elected, ok := firstAfter(bEntries, killed, supervision("LeaderElected"))
	require.True(t, ok, "replica-b runs the groups but was not elected")
	running, _ := groupsRunningSince(bEntries)
	figure(t, "groups: SIGKILL → new leader elected", elected.At().Sub(killed), "(bound LD + 2×2.2×RP = "+bound.String()+")")
	figure(t, "groups: lease acquired → every group's children running", running.Sub(elected.At()),
		fmt.Sprintf("(%d groups, %d children; bound %s)", len(groupTenants), len(groupChildren()), activationSlack))
	figure(t, "groups: SIGKILL → every group's children running", running.Sub(killed), "")
	require.Less(t, elected.At().Sub(killed), bound+requestSlack, "replica-b was elected later than client-go allows")
	require.Less(t, running.Sub(elected.At()), activationSlack, "replica-b's groups ran too long after the election")
	requireHolder(t, watch, b.id)

	// Every group started fresh on B: one incarnation of each child, no budget spent,
	// nothing failed, the crashing tenant's store included (it does not crash here).
	for _, c := range groupChildren() {
		e, ok := firstAfter(bEntries, time.Time{}, func(e journal.Entry) bool { return e.Kind == journal.Running && e.Controller == c })
		require.True(t, ok, "%s never ran on replica-b", c)
		assert.Equal(t, 1, e.Incarnation, "%s on replica-b: a first incarnation", c)
	}
	g = lastGroupStates(bEntries)
	for _, tenant := range groupTenants {
		assert.Zero(t, g[tenant].Restarts, "%s on replica-b: budget spent", tenant)
		assert.Empty(t, g[tenant].Message, "%s on replica-b", tenant)
	}
	assert.Zero(t, countEvents(bEntries, "ChildFailed", ""), "failures on replica-b")
	bMetrics := scrapeReplica(t, bEntries)
	for _, tenant := range groupTenants {
		assert.Zero(t, metric(t, bMetrics, "controllermanager_child_failures_total", tenant), "%s on replica-b", tenant)
		assert.Zero(t, metric(t, bMetrics, "controllermanager_child_restarts_total", tenant), "%s on replica-b", tenant)
	}

	s.stopAll()
	gap := checkNoOverlap(t, s.replicas)
	figure(t, "groups: closest two replicas' intervals came", gap, "(no overlap)")
}

// lastGroupStates is each group's last journalled state.
func lastGroupStates(entries []journal.Entry) map[string]journal.Entry {
	states := map[string]journal.Entry{}
	for _, e := range entries {
		if e.Kind == journal.GroupState {
			states[e.Child] = e
		}
	}
	return states
}

// groupsRunningSince reports whether every tenant's store and reconciler runs at the end
// of entries, and since when all have (the last one's Running).
func groupsRunningSince(entries []journal.Entry) (time.Time, bool) {
	states := controllerStates(entries)
	var since time.Time
	for _, c := range groupChildren() {
		st := states[c]
		if st.kind != journal.Running {
			return time.Time{}, false
		}
		if st.at.After(since) {
			since = st.at
		}
	}
	return since, true
}

// countEvents counts the supervision events of type typ naming child (any child when
// child is empty).
func countEvents(entries []journal.Entry, typ, child string) int {
	n := 0
	for _, e := range entries {
		if e.Kind == journal.Supervision && e.Type == typ && (child == "" || e.Child == child) {
			n++
		}
	}
	return n
}

// scrapeReplica GETs the /metrics of the replica whose journal is entries and returns
// its samples, keyed by metric name and child label: "name child".
func scrapeReplica(t *testing.T, entries []journal.Entry) map[string]float64 {
	t.Helper()
	serving, ok := firstAfter(entries, time.Time{}, func(e journal.Entry) bool { return e.Kind == journal.MetricsServing })
	require.True(t, ok, "the replica journalled no metrics address")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+serving.Addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	samples, err := parseChildSamples(resp.Body)
	require.NoError(t, err)
	return samples
}

// parseChildSamples reads the text exposition format's samples that have a child label.
func parseChildSamples(r io.Reader) (map[string]float64, error) {
	samples := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("metrics: a sample line without its value: %q", line)
		}
		for _, pair := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(pair, "=")
			if k != "child" {
				continue
			}
			f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
			if err != nil {
				return nil, fmt.Errorf("metrics: %q: %w", line, err)
			}
			samples[name+" "+strings.Trim(v, `"`)] = f
		}
	}
	return samples, sc.Err()
}

// metric is the sample of name for child, failing t when there is none.
func metric(t *testing.T, samples map[string]float64, name, child string) float64 {
	t.Helper()
	v, ok := samples[name+" "+child]
	require.True(t, ok, "no %s{child=%q} in the replica's metrics", name, child)
	return v
}
