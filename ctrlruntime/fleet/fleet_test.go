package fleet_test

// Against real kube-apiservers (envtest): member "a" is the shared API server
// of internal/testenv, member "b" one of this test's own, whose
// kube-apiserver process is SIGSTOPped to take it away and SIGCONTed to
// bring it back.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
	"github.com/actorkube/controllermanager/supervisor"
)

const waitFor = 60 * time.Second // roomy: a loaded 2-core race build

// memberEnv starts an API server of the test's own, stopped at cleanup.
func memberEnv(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	testenv.Config(t) // skips without KUBEBUILDER_ASSETS
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := os.Stat(filepath.Join(assets, "kubectl")); err != nil {
		env.ControlPlane.KubectlPath = "/nonexistent/kubectl"
	}
	config, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, env.Stop()) })
	return env, config
}

// apiserverPID finds the kube-apiserver process serving config.
func apiserverPID(t *testing.T, config *rest.Config) int {
	t.Helper()
	u, err := url.Parse(config.Host)
	require.NoError(t, err)
	port := u.Port()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasSuffix(args[0], "kube-apiserver") {
			continue
		}
		for _, a := range args {
			if a == "--secure-port="+port {
				return pid
			}
		}
	}
	t.Fatalf("no kube-apiserver process with --secure-port=%s", port)
	return 0
}

func newNamespace(t *testing.T, cl client.Client, name string) {
	t.Helper()
	require.NoError(t, cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// mirror is a multicluster-runtime style reconciler: for each Secret of ns
// it writes a ConfigMap "out-<name>" into the Secret's own cluster, saying
// which cluster reconciled it.
type mirror struct {
	mgr *fleet.Manager
	ns  string
}

func (m *mirror) Reconcile(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
	if req.Namespace != m.ns {
		return reconcile.Result{}, nil
	}
	cl, err := m.mgr.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, err
	}
	out := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: "out-" + req.Name},
		Data:       map[string]string{"cluster": req.ClusterName},
	}
	if err := cl.GetClient().Create(ctx, out); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

func createSecret(t *testing.T, cl client.Client, ns, name string) {
	t.Helper()
	require.NoError(t, cl.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
}

// waitMirrored waits until cl holds out-<name>, written by the reconciler of
// cluster, and returns how long that took.
func waitMirrored(t *testing.T, cl client.Client, ns, name, cluster string) time.Duration {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var out corev1.ConfigMap
		if !assert.NoError(c, cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "out-" + name}, &out)) {
			return
		}
		assert.Equal(c, cluster, out.Data["cluster"])
	}, waitFor, 50*time.Millisecond, "out-%s in cluster %s", name, cluster)
	return time.Since(start)
}

// startManager starts a ControllerManager on kube (nil: no election) with
// spec and opts, holding f, and shuts it down at the test's end.
func startManager(t *testing.T, kube kubernetes.Interface, spec cm.ControllerManagerConfigSpec, f *cm.Fleet, opts ...cm.Option) *cm.ControllerManager {
	t.Helper()
	cmgr, err := cm.NewControllerManager(cm.NewContext(kube), spec, "", append([]cm.Option{cm.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	require.NoError(t, err)
	cmgr.Add(f)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmgr.ShutdownAndWait(ctx)
	})
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cmgr.Start(sctx, 0))
	return cmgr
}

func waitState(t *testing.T, f *cm.Fleet, cluster string, state cm.ClusterState) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, func() bool {
		st, ok := f.Cluster(cluster)
		return ok && st.State == state
	}, waitFor, 50*time.Millisecond, "cluster %s never %v", cluster, state)
	return time.Since(start)
}

// Two members each reconcile into themselves, the manager electing itself
// on a third API server (the hub); one member's API server is
// frozen (SIGSTOP): it alone goes Offline, its informers and reconciler
// stopped, while the other reconciles on; thawed, it comes back Online and
// reconciles again.
func TestEnvFleetMemberOutageStopsOnlyThatCluster(t *testing.T) {
	configA := testenv.Config(t)
	_, configB := memberEnv(t)
	_, hub := memberEnv(t) // the manager's own cluster: its Lease
	clA, err := client.New(configA, client.Options{})
	require.NoError(t, err)
	clB, err := client.New(configB, client.Options{})
	require.NoError(t, err)
	ns := "fleet-" + rand.String(6)
	newNamespace(t, clA, ns)
	newNamespace(t, clB, ns)

	// The fleet's members count their lists: one of Secrets per cache.
	var listsA, listsB testenv.ListCounter
	memberA, memberB := rest.CopyConfig(configA), rest.CopyConfig(configB)
	listsA.Wrap(memberA)
	listsB.Wrap(memberB)

	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": memberA, "b": memberB}), mgr.Build, cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: time.Second},
		ProbeTimeout:     metav1.Duration{Duration: time.Second},
		FailureThreshold: metav1.Duration{Duration: 3 * time.Second},
		SuccessThreshold: metav1.Duration{Duration: 2 * time.Second},
	})
	hubClient, err := kubernetes.NewForConfig(hub)
	require.NoError(t, err)
	yes := true
	cmgr := startManager(t, hubClient, cm.ControllerManagerConfigSpec{LeaderElection: &cm.LeaderElectionSpec{
		Enabled: &yes, LeaseName: "fleet-hub", LeaseNamespace: "default",
	}}, f, cm.WithIdentity("hub-replica"))

	waitState(t, f, "a", cm.ClusterStateOnline)
	waitState(t, f, "b", cm.ClusterStateOnline)
	// The Lease is the hub's; the members hold none: a member's outage
	// cannot cost the election.
	lease, err := hubClient.CoordinationV1().Leases("default").Get(context.Background(), "fleet-hub", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "hub-replica", ptr.Deref(lease.Spec.HolderIdentity, ""))
	for name, member := range map[string]*rest.Config{"a": configA, "b": configB} {
		kc, err := kubernetes.NewForConfig(member)
		require.NoError(t, err)
		_, err = kc.CoordinationV1().Leases("default").Get(context.Background(), "fleet-hub", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "member %s holds no Lease: %v", name, err)
	}
	createSecret(t, clA, ns, "one")
	createSecret(t, clB, ns, "one")
	t.Logf("first reconcile: a %v, b %v", waitMirrored(t, clA, ns, "one", "a"), waitMirrored(t, clB, ns, "one", "b"))

	require.Equal(t, 1, listsA.Lists("secrets"), "the reconciler's source shares the warm cache's informer")
	require.Equal(t, 1, listsB.Lists("secrets"))

	// Freeze b's API server.
	pid := apiserverPID(t, configB)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	t.Logf("b Offline after %v frozen", waitState(t, f, "b", cm.ClusterStateOffline))
	st, err := cmgr.Status(context.Background())
	require.NoError(t, err)
	cs, ok := st.Child("fleet/b")
	require.True(t, ok)
	require.Equal(t, supervisor.StateStopped, cs.State, "b's subtree is stopped")
	_, err = mgr.GetCluster(context.Background(), "b")
	require.ErrorIs(t, err, fleet.ErrClusterNotFound, "b's cache is stopped")
	for _, path := range []string{"fleet/a/cluster", "fleet/a/mirror"} {
		cs, ok := st.Child(path)
		require.True(t, ok, path)
		require.Equal(t, supervisor.StateRunning, cs.State, path)
		require.Zero(t, cs.Restarts, path)
	}
	st2, _ := f.Cluster("a")
	require.Equal(t, cm.ClusterStateOnline, st2.State)

	// a reconciles on.
	createSecret(t, clA, ns, "two")
	t.Logf("a reconciles with b Offline: %v", waitMirrored(t, clA, ns, "two", "a"))

	// b comes back and reconciles again, on a fresh cache.
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	thawed = true
	t.Logf("b Online after %v thawed", waitState(t, f, "b", cm.ClusterStateOnline))
	createSecret(t, clB, ns, "three")
	t.Logf("b reconciles again: %v", waitMirrored(t, clB, ns, "three", "b"))
	_, err = mgr.GetCluster(context.Background(), "b")
	require.NoError(t, err)
	require.Equal(t, 1, listsA.Lists("secrets"), "a's cache was never restarted")
	require.Equal(t, 2, listsB.Lists("secrets"), "b came back on a fresh cache")
	st, err = cmgr.Status(context.Background())
	require.NoError(t, err)
	require.True(t, st.Leader, "the replica led on the hub throughout")
}

// A member whose API server answers its probes but nothing else: its
// store "cluster" fails (no discovery, no informer) and is restarted by its
// group's supervisor, while a healthy member reconciles on.
func TestEnvFleetMemberThatCannotSyncFailsAlone(t *testing.T) {
	configA := testenv.Config(t)
	clA, err := client.New(configA, client.Options{})
	require.NoError(t, err)
	ns := "fleet-" + rand.String(6)
	newNamespace(t, clA, ns)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" || r.URL.Path == "/livez" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "nothing here", http.StatusServiceUnavailable)
	}))
	t.Cleanup(bad.Close)

	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": rest.CopyConfig(configA), "bad": {Host: bad.URL}}), mgr.Build, cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: time.Second},
		ProbeTimeout:     metav1.Duration{Duration: time.Second},
		FailureThreshold: metav1.Duration{Duration: 3 * time.Second},
		SuccessThreshold: metav1.Duration{Duration: 2 * time.Second},
	})
	cmgr := startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)

	waitState(t, f, "a", cm.ClusterStateOnline)
	require.Eventually(t, func() bool {
		st, err := cmgr.Status(context.Background())
		if err != nil {
			return false
		}
		cs, ok := st.Child("fleet/bad/cluster")
		return ok && cs.Failures > 0
	}, waitFor, 50*time.Millisecond, "bad's store never failed")
	_, err = mgr.GetCluster(context.Background(), "bad")
	require.ErrorIs(t, err, fleet.ErrClusterNotFound)

	createSecret(t, clA, ns, "one")
	waitMirrored(t, clA, ns, "one", "a")
	st, err := cmgr.Status(context.Background())
	require.NoError(t, err)
	cs, _ := st.Child("fleet/a/mirror")
	require.Equal(t, supervisor.StateRunning, cs.State)
	require.Zero(t, cs.Restarts)
	cs, _ = st.Child("fleet/bad/cluster")
	t.Logf("bad's store: %d failures, last %v", cs.Failures, cs.LastError)
}
