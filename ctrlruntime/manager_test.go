package ctrlruntime_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/supervisor"
)

var _ manager.Manager = (*ctrlruntime.Manager)(nil)

// Fields the Manager cannot honour are refused, each by name, all at once,
// before anything contacts a server.
func TestNewManagerRefusesWhatItCannotHonour(t *testing.T) {
	_, err := ctrlruntime.NewManager(nil, manager.Options{})
	require.ErrorContains(t, err, "config is nil")

	_, err = ctrlruntime.NewManager(testConfigWithoutServer(), manager.Options{
		LeaderElection:             true,
		LeaderElectionResourceLock: "configmapsleases",
		LeaderElectionLabels:       map[string]string{"a": "b"},
		PprofBindAddress:           ":6060",
		BaseContext:                func() context.Context { return context.Background() },
	})
	require.Error(t, err)
	for _, field := range []string{"LeaderElectionResourceLock", "LeaderElectionLabels", "LeaderElectionID", "PprofBindAddress", "BaseContext"} {
		assert.ErrorContains(t, err, field)
	}
}

// testConfigWithoutServer points at nothing: NewManager refuses before
// dialling it.
func testConfigWithoutServer() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }

// freeAddr is a loopback address with a port nobody listened on a moment
// ago, for servers whose address must be known before they start.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// logLines keeps what a logr.Logger logs, one line per call.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) with(substrings ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range substrings {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// timedRecorder records when each request was first reconciled after a
// mark, and fails the first reconcile of "fail-once".
type timedRecorder struct {
	mu     sync.Mutex
	mark   time.Time
	first  time.Time // first reconcile after mark
	failed bool
	seen   map[string]int
}

func (r *timedRecorder) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	r.seen[req.Name]++
	if !r.mark.IsZero() && r.first.IsZero() {
		r.first = time.Now()
	}
	if req.Name == "fail-once" && !r.failed {
		r.failed = true
		return reconcile.Result{}, fmt.Errorf("failing %s once", req.Name)
	}
	return reconcile.Result{}, nil
}

func (r *timedRecorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[name]
}

// setMark makes the next reconcile's time count from now.
func (r *timedRecorder) setMark(at time.Time) {
	r.mu.Lock()
	r.mark, r.first = at, time.Time{}
	r.mu.Unlock()
}

func (r *timedRecorder) sinceMark() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		return 0, false
	}
	return r.first.Sub(r.mark), true
}

// A Manager on the real API server, set up the way a kubebuilder main.go
// sets one up: a restartable reconciler from ctrlruntime's builder, a plain
// controller-runtime one, a webhook from ctrl.NewWebhookManagedBy, health
// checks, the probe server. It elects itself, reconciles with
// controller-runtime's log fields, serves probes and the webhook, puts one
// leader_election_master_status series on metrics.Registry, restarts a
// reconciler on RestartChild, and stops everything, cache included.
func TestEnvManagerHostsAKubebuilderSetup(t *testing.T) {
	cfg := testenv.Config(t)
	logs := &logLines{}
	probeAddr := freeAddr(t)

	wio := &envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	require.NoError(t, wio.PrepWithoutInstalling())
	t.Cleanup(func() { _ = wio.Cleanup() })

	lease := "mgr-" + rand.String(6)
	mgr, err := ctrlruntime.NewManager(cfg, manager.Options{
		Logger:                  logs.logger(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          true,
		LeaderElectionID:        lease,
		LeaderElectionNamespace: "default",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	require.NoError(t, err)
	ns := namespace(t, mgr.GetClient())

	// A field index, as a kubebuilder reconciler declares one.
	require.NoError(t, mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.ConfigMap{}, "data.key",
		func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["key"]} }))

	restartable := &timedRecorder{}
	require.NoError(t, ctrlruntime.NewControllerManagedBy(mgr).Named("restartable").
		For(&corev1.ConfigMap{}, inNamespace(ns)).Complete(restartable))
	plain := &timedRecorder{}
	plainName := "plain-" + rand.String(6)
	require.NoError(t, ctrl.NewControllerManagedBy(mgr).Named(plainName).
		WithOptions(controllerOptions()).
		For(&corev1.Secret{}, builder.WithPredicates(predicateFunc(func(o client.Object) bool { return o.GetNamespace() == ns }))).
		Complete(plain))
	require.NoError(t, ctrl.NewWebhookManagedBy(mgr, &corev1.ConfigMap{}).WithDefaulter(labelDefaulter{}).Complete())
	require.NoError(t, mgr.AddHealthzCheck("ping", healthz.Ping))
	require.NoError(t, mgr.AddReadyzCheck("ping", healthz.Ping))

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-stopped:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("Start did not return within a minute of its context's end")
		}
		informer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
		require.NoError(t, err)
		assert.True(t, informer.IsStopped(), "Start stops the cache it started")
	}()

	select {
	case <-mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("not elected within a minute")
	}
	cl := mgr.GetClient()
	require.NoError(t, cl.Create(ctx, configMap(ns, "fail-once")))
	require.NoError(t, cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}))
	require.Eventually(t, func() bool { return restartable.count("fail-once") >= 2 && plain.count("s") >= 1 },
		30*time.Second, 5*time.Millisecond, "both reconcilers reconcile")

	t.Run("children of the tree, by kind", func(t *testing.T) {
		st, err := mgr.ControllerManager().Status(ctx)
		require.NoError(t, err)
		for name, kind := range map[string]string{"restartable": "controller", plainName: "controller"} {
			child, ok := st.Child(name)
			if assert.True(t, ok, "child %q in %v", name, st.Children) {
				assert.EqualValues(t, kind, child.Kind, name)
			}
		}
		// The webhook server runs beside the tree, as the metrics and probe
		// servers do, started before the caches' pre-flight.
		_, ok := st.Child("webhook-server")
		assert.False(t, ok, "the webhook server is no child of the tree: %v", st.Children)
		late := &flagRunnable{needLeader: true}
		require.NoError(t, mgr.Add(late), "Add after Start starts the runnable at once")
		require.Eventually(t, late.started.Load, 30*time.Second, time.Millisecond)
	})

	t.Run("cluster accessors: API reader, REST mapper, field index, event recorder", func(t *testing.T) {
		var direct corev1.ConfigMap
		require.NoError(t, mgr.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: "fail-once"}, &direct))
		mapping, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
		require.NoError(t, err)
		assert.Equal(t, "configmaps", mapping.Resource.Resource)
		indexed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "indexed"}, Data: map[string]string{"key": "wanted"}}
		require.NoError(t, cl.Create(ctx, indexed))
		require.Eventually(t, func() bool {
			var list corev1.ConfigMapList
			return cl.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"data.key": "wanted"}) == nil && len(list.Items) == 1
		}, 30*time.Second, 5*time.Millisecond, "the field index answers from the cache")
		mgr.GetEventRecorderFor("manager-test").Event(&direct, corev1.EventTypeNormal, "Tested", "by the manager test")
		require.Eventually(t, func() bool {
			var events corev1.EventList
			return mgr.GetAPIReader().List(ctx, &events, client.InNamespace(ns)) == nil &&
				slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == "Tested" })
		}, 30*time.Second, 10*time.Millisecond, "the event recorder sends Events")
	})

	t.Run("reconciler logs carry controller-runtime's fields", func(t *testing.T) {
		lines := logs.with(`"Reconciler error"`, `"controller"="restartable"`, `"controllerGroup"=""`,
			`"controllerKind"="ConfigMap"`, `"ConfigMap"=`, `"reconcileID"=`)
		assert.Len(t, lines, 1, "the failed reconcile, logged once with every field: %v", logs.with("Reconciler error"))
	})

	t.Run("probes", func(t *testing.T) {
		require.Eventually(t, func() bool {
			code, _ := probe("http://" + probeAddr + "/readyz")
			return code == http.StatusOK
		}, 30*time.Second, 5*time.Millisecond)
		code, body := get(t, "http://"+probeAddr+"/healthz?verbose")
		assert.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, "[+]ping ok")
		code, body = get(t, "http://"+probeAddr+"/readyz?verbose")
		assert.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, "[+]ping ok")
		for _, check := range []string{"[+]manager", "[+]caches"} {
			assert.NotContains(t, body, check, "readiness is the checks added, as with controller-runtime")
		}
	})

	t.Run("webhook from ctrl.NewWebhookManagedBy serves", func(t *testing.T) {
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create,
				Object: runtime.RawExtension{Raw: mustJSON(t, configMap(ns, "w"))}},
		}
		url := fmt.Sprintf("https://%s:%d/mutate--v1-configmap", wio.LocalServingHost, wio.LocalServingPort)
		httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test's own certificate
		defer httpc.CloseIdleConnections()
		var resp admissionv1.AdmissionReview
		require.Eventually(t, func() bool {
			res, err := httpc.Post(url, "application/json", bytes.NewReader(mustJSON(t, review)))
			if err != nil {
				return false
			}
			defer res.Body.Close()
			return res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&resp) == nil
		}, 30*time.Second, 10*time.Millisecond)
		require.NotNil(t, resp.Response)
		assert.True(t, resp.Response.Allowed)
		assert.Contains(t, string(resp.Response.Patch), "defaulted")
	})

	t.Run("one leader_election_master_status series on metrics.Registry", func(t *testing.T) {
		families, err := ctrlmetrics.Registry.Gather()
		require.NoError(t, err)
		var series []string
		for _, f := range families {
			if f.GetName() != "leader_election_master_status" {
				continue
			}
			for _, m := range f.GetMetric() {
				series = append(series, fmt.Sprintf("%v=%v", m.GetLabel(), m.GetGauge().GetValue()))
			}
		}
		assert.Len(t, series, 1, "%v", series)
		if len(series) == 1 {
			assert.Contains(t, series[0], lease)
			assert.True(t, strings.HasSuffix(series[0], "=1"), series[0])
		}
	})

	t.Run("RestartChild rebuilds the reconciler, reconciling at once", func(t *testing.T) {
		require.Eventually(t, mgr.ControllerManager().IsStarted, time.Minute, time.Millisecond)
		at := time.Now()
		restartable.setMark(at)
		_, err := mgr.ControllerManager().Request(ctx, supervisor.RestartChild{Name: "restartable"})
		require.NoError(t, err)
		var took time.Duration
		require.Eventually(t, func() bool {
			var ok bool
			took, ok = restartable.sinceMark()
			return ok
		}, 30*time.Second, time.Millisecond)
		t.Logf("figure: RestartChild to first reconcile: %v", took)
	})
}

// controllerOptions lets a plain controller-runtime controller take a name
// again under -count=N, as controller-runtime's own tests do.
func controllerOptions() controller.Options {
	return controller.Options{SkipNameValidation: ptr.To(true)}
}

// labelDefaulter labels a ConfigMap, as a kubebuilder defaulting webhook
// would default a field.
type labelDefaulter struct{}

func (labelDefaulter) Default(_ context.Context, cm *corev1.ConfigMap) error {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["defaulted"] = "true"
	return nil
}

// probe is a GET for a poll's condition: a server not listening yet is
// code 0, not a failure.
func probe(url string) (int, string) {
	res, err := http.Get(url) //nolint:gosec // a test's loopback address
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err.Error()
	}
	return res.StatusCode, string(b)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
