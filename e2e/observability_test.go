package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/cluster"
	"github.com/actorkube/controllermanager/health"
)

// failingController is a controller whose failures the test reports.
type failingController struct {
	mu     sync.Mutex
	report func(error)
}

func (c *failingController) Name() string             { return "cron" }
func (c *failingController) Shutdown(context.Context) {}
func (c *failingController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "cron", Healthy: true}
}
func (c *failingController) Run(ctx context.Context) error {
	report, _ := cm.FailureReporter(ctx)
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	return nil
}
func (c *failingController) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(err)
}

// TestEventsOnTheRealAPIServer runs a manager in this process on a real API server, as
// a Pod would with the downward API's POD_NAME, POD_NAMESPACE and POD_UID, and checks
// the Events it leaves: client-go's LeaderElection Events on the Lease; LeaderElected,
// ChildFailed (40 identical failures: one Event whose count the spam filter stops at
// 25) and LeaderLost (the Lease stolen) on the Pod, found by the field selector
// kubectl describe uses.
func TestEventsOnTheRealAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	client := c.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const ns = "default"
	// No kubelet runs it: the Pod is only what its Events are about.
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "jobs-operator-7d9f"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "example.com/jobs-operator:v1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Setenv("POD_NAME", pod.Name)
	t.Setenv("POD_NAMESPACE", ns)
	t.Setenv("POD_UID", string(pod.UID))

	yes := true
	mgr, err := cm.NewControllerManager(cm.NewContext(client), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: "jobs-operator", LeaseNamespace: ns,
			LeaseDuration: metav1.Duration{Duration: leaseDuration},
			RenewDeadline: metav1.Duration{Duration: renewDeadline},
			RetryPeriod:   metav1.Duration{Duration: retryPeriod},
			OnLeaseLost:   cm.LeaseLostExit,
		},
		Supervision: &cm.SupervisionSpec{
			MaxRestarts: 100, InitialBackoff: metav1.Duration{Duration: time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 2 * time.Millisecond},
			HealthInterval: metav1.Duration{Duration: time.Hour},
		},
	}, "", cm.WithIdentity("replica-a"), cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	cron := &failingController{}
	mgr.Add(cron)
	restarts := make(chan int, 100)
	cancelEvents := mgr.Subscribe(func(e cm.Event) {
		if e.Type == cm.ChildStarted && e.Restarts > 0 {
			restarts <- e.Restarts
		}
	})
	defer cancelEvents()
	require.NoError(t, mgr.Start(ctx, time.Minute))

	const failures = 40
	for i := 1; i <= failures; i++ {
		cron.fail(errors.New("watch closed"))
		select {
		case n := <-restarts:
			require.Equal(t, i, n)
		case <-ctx.Done():
			t.Fatalf("restart %d: %v", i, ctx.Err())
		}
	}

	// The recorder writes through the manager's clientset, at client-go's default 5
	// requests per second: wait for the ChildFailed Events (25 pass the spam filter) to
	// be written, so that the loss's Events below are not still queued behind them when
	// the manager stops and flushes within its bound. The watch-driven elector sees the
	// steal at once, where client-go's took the renew deadline.
	require.Eventually(t, func() bool {
		list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=ChildFailed"})
		if err != nil {
			return false
		}
		var n int32
		for _, e := range list.Items {
			n += e.Count
		}
		return n >= 25
	}, 30*time.Second, 50*time.Millisecond, "the ChildFailed Events were not written")

	// Steal the Lease: the leader sees it taken (its watch) and with Exit stops.
	leases := client.CoordinationV1().Leases(ns)
	lease, err := leases.Get(ctx, "jobs-operator", metav1.GetOptions{})
	require.NoError(t, err)
	thief, now := "thief", metav1.NowMicro()
	lease.Spec.HolderIdentity, lease.Spec.RenewTime, lease.Spec.AcquireTime = &thief, &now, &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	select {
	case <-mgr.Done():
	case <-ctx.Done():
		t.Fatal("the manager did not stop after its Lease was stolen")
	}
	mgr.ShutdownAndWait(ctx)
	// The recorder writes in the background and flushes at stop within a bound: on a
	// loaded machine the last Events may land a moment after ShutdownAndWait.
	assert.Eventually(t, func() bool {
		list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=LeaderLost"})
		return err == nil && len(list.Items) == 1
	}, 30*time.Second, 50*time.Millisecond, "no LeaderLost Event")

	onPod, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Pod", "involvedObject.name": pod.Name,
		"involvedObject.namespace": ns, "involvedObject.uid": string(pod.UID),
	}.String()})
	require.NoError(t, err)
	onLease, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Lease", "involvedObject.name": "jobs-operator",
	}.String()})
	require.NoError(t, err)

	type seen struct {
		typ   string
		count int32
		msg   string
	}
	byReason := map[string]seen{}
	for _, e := range append(onPod.Items, onLease.Items...) {
		key := e.InvolvedObject.Kind + " " + e.Reason
		if e.Reason == "LeaderElection" {
			key += " " + strings.TrimPrefix(e.Message, "replica-a ")
		}
		have := byReason[key]
		byReason[key] = seen{typ: e.Type, count: have.count + e.Count, msg: e.Message}
		t.Logf("%s %s %s/%s (x%d, from %s on %s): %s", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Count, e.Source.Component, e.Source.Host, e.Message)
	}
	want := map[string]seen{
		"Lease LeaderElection became leader":   {typ: "Normal", count: 1, msg: "replica-a became leader"},
		"Lease LeaderElection stopped leading": {typ: "Normal", count: 1, msg: "replica-a stopped leading"},
		"Pod LeaderElected":                    {typ: "Normal", count: 1, msg: "replica-a became leader of Lease default/jobs-operator"},
		"Pod ChildFailed":                      {typ: "Warning", count: 25, msg: `controller "cron": failure reported by its background work: watch closed`},
	}
	for key, w := range want {
		require.Equal(t, w, byReason[key], key)
	}
	lost := byReason["Pod LeaderLost"]
	require.Equal(t, "Warning", lost.typ, "LeaderLost")
	require.True(t, strings.HasPrefix(lost.msg, "replica-a lost Lease default/jobs-operator: "), lost.msg)
	require.Len(t, byReason, len(want)+1, "unexpected Events: %v", byReason)
}

// probeLine is the shape of one line of a healthz listing, in k8s.io/apiserver's format.
var probeLine = regexp.MustCompile(`^(\[\+\][^ ]+ ok|\[\+\][^ ]+ excluded: ok|\[-\][^ ]+ failed: reason withheld|warn: some health checks cannot be excluded: no matches for "[^"]+"(,"[^"]+")*|(healthz|livez|readyz) check (passed|failed))$`)

// shape is a probe's answer with the check names taken out: what two servers with
// different checks must still agree on.
func shape(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	names := regexp.MustCompile(`^(\[[+-]\])[^ ]+`)
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i, line := range lines {
		require.Regexp(t, probeLine, line, "a line of %q", body)
		if i == len(lines)-1 {
			require.Contains(t, line, " check ", "the verdict comes last in %q", body)
		}
		out = append(out, names.ReplaceAllString(line, "${1}NAME"))
	}
	// The kinds of line, each once: the apiserver has other checks, in another order.
	slices.Sort(out)
	return slices.Compact(out)
}

type probeAnswer struct {
	code        int
	contentType string
	nosniff     string
	body        string
}

func getProbe(t *testing.T, client *http.Client, url string) probeAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return probeAnswer{res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("X-Content-Type-Options"), string(body)}
}

// TestProbesAnswerAsTheAPIServerDoes asks the real kube-apiserver and health.NewHandler
// the same questions and compares the shapes of their answers: a plain probe's "ok",
// the verbose listing, an excluded check, an exclusion that matches nothing, one check
// by its path, /livez beside /healthz. The failing shape ("[-]name failed: reason
// withheld") is checked against the listing's grammar only: a healthy apiserver has no
// failing check to show.
func TestProbesAnswerAsTheAPIServerDoes(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	apiClient, err := rest.HTTPClientFor(c.Config())
	require.NoError(t, err)
	defer apiClient.CloseIdleConnections()

	yes := true
	mgr, err := cm.NewControllerManager(cm.NewContext(c.Clientset()), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{
			Enabled: &yes, LeaseName: "probes", LeaseNamespace: "default",
			LeaseDuration: metav1.Duration{Duration: leaseDuration},
			RenewDeadline: metav1.Duration{Duration: renewDeadline},
			RetryPeriod:   metav1.Duration{Duration: retryPeriod},
		},
	}, "", cm.WithIdentity("probes-a"), cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	mgr.Add(&failingController{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, mgr.Start(ctx, time.Minute))
	defer mgr.ShutdownAndWait(context.Background())
	srv := httptest.NewServer(health.NewHandler(mgr))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	// Each question, asked of the apiserver with one of its checks, of us with one of
	// ours: the apiserver's "etcd" and "ping", our "phase" and "leaderElection".
	tests := []struct {
		name      string
		apiserver string
		ours      string
	}{
		{"healthz plain", "/healthz", "/healthz"},
		{"livez plain", "/livez", "/livez"},
		{"readyz plain", "/readyz", "/readyz"},
		{"healthz verbose", "/healthz?verbose", "/healthz?verbose"},
		{"livez verbose", "/livez?verbose", "/livez?verbose"},
		{"healthz excluded", "/healthz?verbose&exclude=etcd", "/healthz?verbose&exclude=phase"},
		{"livez excluded", "/livez?verbose&exclude=ping", "/livez?verbose&exclude=ping"},
		{"exclusion matching nothing", "/healthz?verbose&exclude=nope&exclude=etcd&exclude=also-nope", "/healthz?verbose&exclude=nope&exclude=phase&exclude=also-nope"},
		{"excluded, not verbose", "/livez?exclude=etcd", "/livez?exclude=phase"},
		{"one check", "/healthz/ping", "/healthz/leaderElection"},
		{"one livez check", "/livez/ping", "/livez/ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			theirs := getProbe(t, apiClient, c.URL()+tt.apiserver)
			ours := getProbe(t, srv.Client(), srv.URL+tt.ours)
			t.Logf("apiserver %s → %d\n%s", tt.apiserver, theirs.code, theirs.body)
			t.Logf("ours %s → %d\n%s", tt.ours, ours.code, ours.body)
			require.Equal(t, http.StatusOK, theirs.code)
			require.Equal(t, theirs.code, ours.code)
			require.Equal(t, theirs.contentType, ours.contentType)
			if theirs.nosniff != "" { // we send it on a single check's answer too
				require.Equal(t, theirs.nosniff, ours.nosniff)
			}
			if theirs.body == "ok" {
				require.Equal(t, "ok", ours.body)
				return
			}
			require.Equal(t, shape(t, theirs.body), shape(t, ours.body))
			// The warning names the same exclusions the same way.
			warn := func(body string) string {
				for _, l := range strings.Split(body, "\n") {
					if strings.HasPrefix(l, "warn:") {
						return l
					}
				}
				return ""
			}
			require.Equal(t, warn(theirs.body), warn(ours.body))
		})
	}

	// Our failing listing has the grammar of the apiserver's, its reasons withheld.
	mgr.ShutdownAndWait(ctx)
	for _, path := range []string{"/healthz", "/livez"} {
		ours := getProbe(t, srv.Client(), srv.URL+path)
		require.Equal(t, http.StatusInternalServerError, ours.code, path)
		shape(t, ours.body)
		require.Contains(t, ours.body, "[-]phase failed: reason withheld\n", path)
		require.True(t, strings.HasSuffix(ours.body, fmt.Sprintf("%s check failed\n", strings.TrimPrefix(path, "/"))), ours.body)
	}
}
