package controllermanager_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	k8srecord "k8s.io/client-go/tools/record"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/internal/kubeevents"
	"github.com/actorkube/controllermanager/supervisor"
)

// Kubernetes Events, the panics metric, leader_election_master_status and
// WithLogr, through the public API on a fake clientset.

// panicky is a controller whose Run panics on the runs listed in panicOn
// (1 is the first) and succeeds otherwise; its failures are reported by
// the test.
type panicky struct {
	metricsController
	mu      sync.Mutex
	runs    int
	panicOn map[int]bool
}

func (c *panicky) Run(ctx context.Context) error {
	c.mu.Lock()
	c.runs++
	n := c.runs
	c.mu.Unlock()
	if c.panicOn[n] {
		panic(fmt.Sprintf("run %d went wrong", n))
	}
	return c.metricsController.Run(ctx)
}

func observeSpec() cm.ControllerManagerConfigSpec {
	yes := true
	return cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{Enabled: &yes, LeaseName: "jobs-operator", LeaseNamespace: "jobs"},
		Supervision: &cm.SupervisionSpec{InitialBackoff: metav1Duration(time.Millisecond), MaxBackoff: metav1Duration(2 * time.Millisecond),
			HealthInterval: metav1Duration(time.Hour)},
	}
}

// waitFor returns a channel closed at the first event of m that match
// accepts.
func waitFor(t *testing.T, m *cm.ControllerManager, match func(cm.Event) bool) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	cancel := m.Subscribe(func(e cm.Event) {
		if match(e) {
			once.Do(func() { close(ch) })
		}
	})
	t.Cleanup(cancel)
	return ch
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(metricsWait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func shutdown(t *testing.T, m *cm.ControllerManager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), metricsWait)
	defer cancel()
	m.ShutdownAndWait(ctx)
}

// The reasons the recorder (internal/kubeevents) records are the ones the
// root documents and users filter on.
func TestEventReasonsAreTheRecorders(t *testing.T) {
	for _, c := range []struct{ root, recorded string }{
		{cm.EventReasonLeaderElected, kubeevents.ReasonLeaderElected},
		{cm.EventReasonLeaderLost, kubeevents.ReasonLeaderLost},
		{cm.EventReasonEscalated, kubeevents.ReasonEscalated},
		{cm.EventReasonChildFailed, kubeevents.ReasonChildFailed},
		{cm.EventReasonShardAcquired, kubeevents.ReasonShardAcquired},
		{cm.EventReasonShardReleased, kubeevents.ReasonShardReleased},
		{cm.EventReasonShardLost, kubeevents.ReasonShardLost},
	} {
		assert.Equal(t, c.root, c.recorded)
	}
}

// eventLine is an Event as "Type Reason Kind/namespace/name: message".
func eventLine(e corev1.Event) string {
	o := e.InvolvedObject
	return fmt.Sprintf("%s %s %s/%s/%s: %s", e.Type, e.Reason, o.Kind, o.Namespace, o.Name, e.Message)
}

func TestEventsOnTheAPIServer(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		object string // Kind/namespace/name of the supervision Events
	}{
		{name: "on the Lease", object: "Lease/jobs/jobs-operator"},
		{name: "on the Pod", env: map[string]string{"POD_NAME": "jobs-operator-7d9f", "POD_NAMESPACE": "jobs", "POD_UID": "0d7a5b4c"}, object: "Pod/jobs/jobs-operator-7d9f"},
		{name: "on the Lease without POD_NAMESPACE", env: map[string]string{"POD_NAME": "jobs-operator-7d9f"}, object: "Lease/jobs/jobs-operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			client := fake.NewClientset()
			cron := &panicky{metricsController: metricsController{name: "cron"}, panicOn: map[int]bool{2: true}}
			m := startMetricsManager(t, cm.NewContext(client), observeSpec(), []cm.Controller{cron}, cm.WithIdentity("replica-a"))
			restarted := waitFor(t, m, func(e cm.Event) bool { return e.Type == cm.ChildStarted && e.Restarts == 2 })
			cron.fail(errors.New("watch closed"))
			await(t, restarted, "cron's second restart")
			shutdown(t, m)

			// The manager's own recorder flushed before it stopped: every
			// Event is there once ShutdownAndWait has returned.
			list, err := client.CoreV1().Events("jobs").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var have []string
			for _, e := range list.Items {
				have = append(have, eventLine(e))
				if e.Source.Component != "jobs-operator" || e.Source.Host != "replica-a" {
					t.Errorf("source: want jobs-operator on replica-a, have %+v", e.Source)
				}
				if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.UID != "0d7a5b4c" {
					t.Errorf("the Pod's UID: want POD_UID, have %q", e.InvolvedObject.UID)
				}
			}
			want := []string{
				"Normal LeaderElection Lease/jobs/jobs-operator: replica-a became leader",
				"Normal LeaderElected " + tt.object + ": replica-a became leader of Lease jobs/jobs-operator",
				"Warning ChildFailed " + tt.object + `: controller "cron": failure reported by its background work: watch closed`,
				"Warning ChildFailed " + tt.object + `: controller "cron": panic in Run: run 2 went wrong`,
				"Normal LeaderElection Lease/jobs/jobs-operator: replica-a stopped leading",
			}
			for _, w := range want {
				if !containsPrefix(have, w) {
					t.Errorf("no Event %q among\n%s", w, strings.Join(have, "\n"))
				}
			}
			if len(have) != len(want) {
				t.Errorf("want %d Events, have %d:\n%s", len(want), len(have), strings.Join(have, "\n"))
			}
		})
	}
}

// The manager's own Events are written before ShutdownAndWait returns,
// even when the API server takes longer to write them than the wait for
// event subscribers (WithSubscriberDrainTimeout) allows: the host exits on
// return, and the flush is what the Events of the end are written by. The
// manager's own recorder is bounded by kubeevents.FlushTimeout instead.
func TestEventsOfTheEndAreWrittenWhenTheAPIServerIsSlowerThanTheDrain(t *testing.T) {
	client := fake.NewClientset()
	const latency = time.Second // the write of "stopped leading"; the drain waits 50ms
	var written atomic.Bool
	client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && strings.Contains(e.Message, "stopped leading") {
			time.Sleep(latency) // latency of the API server (not synchronisation)
			written.Store(true) // the fake holds its lock for the call: a List would wait for it
		}
		return false, nil, nil
	})
	m := startMetricsManager(t, cm.NewContext(client), observeSpec(), nil, cm.WithIdentity("replica-a"),
		cm.WithSubscriberDrainTimeout(50*time.Millisecond))
	shutdown(t, m)
	if !written.Load() {
		t.Error("ShutdownAndWait returned while the Event of the Lease's release was still being written")
	}
}

// containsPrefix reports whether an element of have starts with want.
func containsPrefix(have []string, want string) bool {
	for _, h := range have {
		if strings.HasPrefix(h, want) {
			return true
		}
	}
	return false
}

func TestEventsARepeatedFailureIsCountedNotRepeated(t *testing.T) {
	client := fake.NewClientset()
	cron := &metricsController{name: "cron"}
	spec := observeSpec()
	spec.Supervision.MaxRestarts = 100
	m := startMetricsManager(t, cm.NewContext(client), spec, []cm.Controller{cron}, cm.WithIdentity("replica-a"))
	const failures = 40
	for i := 1; i <= failures; i++ {
		restarted := waitFor(t, m, func(e cm.Event) bool { return e.Type == cm.ChildStarted && e.Restarts == i })
		cron.fail(errors.New("watch closed"))
		await(t, restarted, fmt.Sprintf("restart %d", i))
	}
	failed := func() (objects int, count int32) {
		list, err := client.CoreV1().Events("jobs").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == cm.EventReasonChildFailed {
				objects++
				count += e.Count
			}
		}
		return objects, count
	}
	// 40 identical failures: one Event, its count patched. The spam filter
	// lets 25 Warnings through (a burst of 25, then one per 5 minutes);
	// the first creates the Event, the next 24 patch its count. The
	// recorder writes in the background: wait for it (on a loaded machine
	// it may still be writing when the manager stops, and the flush at
	// stop is bounded), then check that no more come.
	assert.Eventually(t, func() bool { _, count := failed(); return count >= 25 }, metricsWait, 5*time.Millisecond)
	shutdown(t, m)
	if objects, count := failed(); objects != 1 || count != 25 {
		t.Errorf("want one ChildFailed Event counting 25 of the %d failures, have %d Events counting %d", failures, objects, count)
	}
}

func TestEventsWithTheHostsRecorder(t *testing.T) {
	rec := k8srecord.NewFakeRecorder(100)
	m := startMetricsManager(t, cm.NewContext(fake.NewClientset()), observeSpec(), nil, cm.WithIdentity("replica-a"), cm.WithEventRecorder(rec))
	shutdown(t, m)
	var have []string
	for len(rec.Events) > 0 {
		have = append(have, <-rec.Events)
	}
	want := []string{
		"Normal LeaderElection replica-a became leader",
		"Normal LeaderElected replica-a became leader of Lease jobs/jobs-operator",
		"Normal LeaderElection replica-a stopped leading",
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Errorf("want\n%s\nhave\n%s", strings.Join(want, "\n"), strings.Join(have, "\n"))
	}
}

func TestEventsEscalatedAndLeaderLost(t *testing.T) {
	rec := k8srecord.NewFakeRecorder(100)
	spec := observeSpec()
	spec.Supervision.MaxRestarts = 1
	cron := &metricsController{name: "cron"}
	m := startMetricsManager(t, cm.NewContext(fake.NewClientset()), spec, []cm.Controller{cron}, cm.WithIdentity("replica-a"), cm.WithEventRecorder(rec))
	restarted := waitFor(t, m, func(e cm.Event) bool { return e.Type == cm.ChildStarted && e.Restarts == 1 })
	cron.fail(errors.New("watch closed"))
	await(t, restarted, "the restart")
	cron.fail(errors.New("watch closed"))
	await(t, m.Done(), "the escalation")
	shutdown(t, m)
	var have []string
	for len(rec.Events) > 0 {
		have = append(have, <-rec.Events)
	}
	if !containsPrefix(have, `Warning Escalated supervisor: controller "cron" failed 2 times`) {
		t.Errorf("no Escalated Warning among\n%s", strings.Join(have, "\n"))
	}
}

func TestPanicsCountedPerChild(t *testing.T) {
	jobs := &metricsController{name: "jobs"}
	cron := &panicky{metricsController: metricsController{name: "cron"}, panicOn: map[int]bool{2: true, 3: true}}
	m := startMetricsManager(t, nil, cm.ControllerManagerConfigSpec{Supervision: observeSpec().Supervision}, []cm.Controller{jobs, cron})
	restarted := waitFor(t, m, func(e cm.Event) bool { return e.Type == cm.ChildStarted && e.Child == "cron" && e.Restarts == 3 })
	cron.fail(errors.New("watch closed"))
	await(t, restarted, "cron's third restart")
	want := `
# HELP controllermanager_child_panics_total Panics recovered in a child's user calls (Run, Recover, Start, Shutdown, GetHealth, Ready, Handle).
# TYPE controllermanager_child_panics_total counter
controllermanager_child_panics_total{child="cron",kind="controller"} 2
controllermanager_child_panics_total{child="jobs",kind="controller"} 0
`
	// The count comes from the events, a subscriber behind the supervisor.
	var err error
	if !assert.Eventually(t, func() bool {
		err = testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "controllermanager_child_panics_total")
		return err == nil
	}, metricsWait, 5*time.Millisecond) {
		t.Error(err)
	}
}

func TestLeaderElectionMasterStatus(t *testing.T) {
	m := startMetricsManager(t, cm.NewContext(fake.NewClientset()), observeSpec(), nil, cm.WithIdentity("replica-a"))
	want := `
# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.
# TYPE leader_election_master_status gauge
leader_election_master_status{name="jobs-operator"} 1
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "leader_election_master_status"); err != nil {
		t.Error(err)
	}
	shutdown(t, m)
	want = strings.Replace(want, "} 1", "} 0", 1)
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "leader_election_master_status"); err != nil {
		t.Errorf("after shutdown: %v", err)
	}
}

// logLines collects what a funcr logger writes.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

// find reports whether a line contains every one of subs.
func (l *logLines) find(subs ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, s := range l.lines {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				continue next
			}
		}
		return true
	}
	return false
}

func TestWithLogr(t *testing.T) {
	var logs logLines
	logger := funcr.New(logs.add, funcr.Options{Verbosity: 4})
	cron := &metricsController{name: "cron"}
	m := startMetricsManager(t, cm.NewContext(fake.NewClientset()), observeSpec(), []cm.Controller{cron}, cm.WithLogr(logger), cm.WithIdentity("replica-a"))
	restarted := waitFor(t, m, func(e cm.Event) bool { return e.Type == cm.ChildStarted && e.Restarts == 1 })
	cron.fail(errors.New("watch closed"))
	await(t, restarted, "the restart")
	shutdown(t, m)
	for _, want := range [][]string{
		{`"msg"="child failed"`, `"child"="cron"`},        // the runtime's own, an slog Error
		{`"msg"="Attempting to acquire leader lease..."`}, // client-go's leader election, through klog's context
		{`"msg"="Successfully acquired lease"`, `"lock"="jobs/jobs-operator"`},
	} {
		if !logs.find(want...) {
			t.Errorf("the logr logger did not receive %q among\n%s", want, strings.Join(logs.lines, "\n"))
		}
	}
}

func TestWithLogrAndWithLoggerAreOneSink(t *testing.T) {
	var logs logLines
	var text strings.Builder
	var mu sync.Mutex
	slogger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return text.Write(p)
	}), nil))
	// The last one wins: both set the one logger.
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", cm.WithLogger(slogger), cm.WithLogr(funcr.New(logs.add, funcr.Options{})))
	if err != nil {
		t.Fatal(err)
	}
	m.Add(cm.Runnable(nil))
	if err := m.Start(context.Background(), time.Second); err == nil {
		t.Fatal("want the nil runnable to fail the start")
	}
	shutdown(t, m)
	if !logs.find("manager failed") {
		t.Errorf("WithLogr given last: the logr logger did not receive the failure: %q", logs.lines)
	}
	mu.Lock()
	defer mu.Unlock()
	if text.Len() != 0 {
		t.Errorf("WithLogger given first was replaced, yet received %q", text.String())
	}
	// A zero logr.Logger discards.
	quiet, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", cm.WithLogr(logr.Logger{}))
	if err != nil {
		t.Fatal(err)
	}
	quiet.Add(cm.Runnable(nil))
	if err := quiet.Start(context.Background(), time.Second); err == nil {
		t.Fatal("want the nil runnable to fail the start")
	}
	shutdown(t, quiet)
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// selfSigned writes a self-signed serving pair for 127.0.0.1 and returns its files and
// a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestWebhookServerServesLivez: the WebhookServer routes /livez to its Probes, and
// health.NewHandler answers it (it answered 404 before).
func TestWebhookServerServesLivez(t *testing.T) {
	mgr := cm.NewWebhookManager(nil, cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.ShutdownAndWait(context.Background()) })
	certFile, keyFile, pool := selfSigned(t)
	srv, err := cm.NewWebhookServer(cm.WebhookServerConfig{
		CertFile: certFile, KeyFile: keyFile, Handler: mgr.Handler(), Probes: health.NewHandler(mgr),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: metricsWait}
	for path, want := range map[string]string{
		"/livez":         "ok",
		"/livez?verbose": "[+]ping ok\n[+]phase ok\nlivez check passed\n",
		"/livez/ping":    "ok",
	} {
		res, err := client.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("GET %s: want 200 %q, have %d %q", path, want, res.StatusCode, body)
		}
	}
}

// A Start after ShutdownAndWait (the manager stopped before it started)
// answers that the manager stopped, and starts nothing for it: not the
// Events recorder, whose goroutines would otherwise wait five seconds for
// a terminal event that came before it subscribed.
func TestStartAfterShutdownStartsNoRecorder(t *testing.T) {
	m, err := cm.NewControllerManager(cm.NewContext(fake.NewClientset()), observeSpec(), "",
		cm.WithIdentity("replica-a"), cm.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	m.ShutdownAndWait(context.Background())
	before := goleak.IgnoreCurrent()
	err = m.Start(context.Background(), 0)
	require.ErrorIs(t, err, supervisor.ErrStopped)
	goleak.VerifyNone(t, before)
}
