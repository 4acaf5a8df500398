package ctrlruntime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// deafReconciler blocks the first reconcile of its key, ignoring its
// context, until released.
type deafReconciler struct {
	entered     chan struct{}
	release     chan struct{}
	enterOnce   sync.Once
	releaseOnce sync.Once
}

func newDeafReconciler() *deafReconciler {
	return &deafReconciler{entered: make(chan struct{}), release: make(chan struct{})}
}

func (d *deafReconciler) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	d.enterOnce.Do(func() { close(d.entered) })
	<-d.release // deaf to its context
	return reconcile.Result{}, nil
}

func (d *deafReconciler) free() { d.releaseOnce.Do(func() { close(d.release) }) }

// deafLeader is a Manager electing on a Lease of its own, hosting one
// reconciler (named name) that is deaf to its context, started and inside
// that reconcile.
type deafLeader struct {
	direct          client.Client
	ns, lease, name string
	mgr             *ctrlruntime.Manager
	deaf            *deafReconciler
	cancel          context.CancelFunc
	stopped         chan error // Start's error
}

// startDeafLeader starts a deafLeader with opts (its metrics server and
// election fields are set here) and waits until its reconcile is running.
func startDeafLeader(t *testing.T, opts manager.Options) *deafLeader {
	t.Helper()
	cfg := testenv.Config(t)
	direct, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	d := &deafLeader{direct: direct, ns: namespace(t, direct), lease: "deaf-" + rand.String(6), name: "deaf-" + rand.String(6),
		deaf: newDeafReconciler(), stopped: make(chan error, 1)}
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = true, d.lease, d.ns
	d.mgr, err = ctrlruntime.NewManager(cfg, opts)
	require.NoError(t, err)
	t.Cleanup(d.deaf.free)
	require.NoError(t, ctrlruntime.NewControllerManagedBy(d.mgr).Named(d.name).
		For(&corev1.ConfigMap{}, inNamespace(d.ns)).Complete(d.deaf))
	require.NoError(t, direct.Create(context.Background(), configMap(d.ns, "k")))

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.cancel = cancel
	go func() { d.stopped <- d.mgr.Start(ctx) }()
	select {
	case <-d.deaf.entered:
	case <-time.After(time.Minute):
		t.Fatal("no reconcile within a minute")
	}
	return d
}

// A JobSet-style attack: the leader is asked to stop (SIGTERM) while a
// reconcile ignores its context. controller-runtime waits
// GracefulShutdownTimeout, then releases the Lease (LeaderElectionReleaseOnCancel)
// and returns "failed waiting for all runnables to end": the standby takes
// the Lease at once while the deaf reconcile still runs in the old
// process, until it exits. Here the Lease must not be given up while a
// reconcile of the leader still runs: Start returns an error naming the
// reconciler (an *UnstoppedError), and the Lease is left to expire.
func TestEnvDeafReconcileKeepsTheLeaseAtShutdown(t *testing.T) {
	d := startDeafLeader(t, manager.Options{
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationPtr(2 * time.Second), RenewDeadline: durationPtr(1500 * time.Millisecond),
		RetryPeriod:             durationPtr(100 * time.Millisecond),
		GracefulShutdownTimeout: durationPtr(time.Second),
	})
	direct, ns, leaseName, name, mgr, deaf, cancel, stopped := d.direct, d.ns, d.lease, d.name, d.mgr, d.deaf, d.cancel, d.stopped
	st, err := mgr.ControllerManager().Status(context.Background())
	require.NoError(t, err)
	identity := st.Identity
	cancel()

	var startErr error
	select {
	case startErr = <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30s of its context's end (GracefulShutdownTimeout 1s)")
	}
	t.Logf("Start: %v", startErr)
	var lease coordinationv1.Lease
	require.NoError(t, direct.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName}, &lease))
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	assert.Equal(t, identity, holder, "the Lease was given up while a reconcile of the leader still runs")
	holderNow := func() string {
		var now coordinationv1.Lease
		if err := direct.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName}, &now); err != nil || now.Spec.HolderIdentity == nil {
			return ""
		}
		return *now.Spec.HolderIdentity
	}
	// Kept, and renewed, while this replica's reconcile runs: were the
	// process to exit now, it would expire a lease duration later.
	assert.Never(t, func() bool { return holderNow() != identity }, time.Second, 20*time.Millisecond,
		"the Lease was given up after Start returned, while a reconcile of the leader still runs")
	require.Error(t, startErr, "Start says the manager did not stop")
	assert.True(t, errors.Is(startErr, cm.ErrUnstopped), "Start's error is an UnstoppedError: %v", startErr)
	assert.Contains(t, startErr.Error(), name, "Start's error names the reconciler")
	deaf.free()
	// Once the reconcile has returned, the shutdown completes and the
	// Lease is given up.
	require.Eventually(t, func() bool { return holderNow() == "" }, 20*time.Second, 20*time.Millisecond,
		"the Lease is given up once the reconcile has returned")
}

// The same attack when the leader loses its Lease (taken by another
// holder) while a reconcile ignores its context: the fence cannot stop it,
// so the manager must fail at the fence timeout naming the reconciler, the
// only fence left being the host's exit, rather than count the reconciler
// fenced because its Shutdown gave up waiting. (Under controller-runtime,
// Start returns "leader election lost" at once and the process exits.)
func TestEnvDeafReconcileFailsTheFence(t *testing.T) {
	d := startDeafLeader(t, manager.Options{
		LeaseDuration: durationPtr(3 * time.Second), RenewDeadline: durationPtr(2 * time.Second),
		RetryPeriod: durationPtr(100 * time.Millisecond),
	})
	direct, ns, leaseName, name, deaf, stopped := d.direct, d.ns, d.lease, d.name, d.deaf, d.stopped
	// Another holder takes the Lease.
	require.Eventually(t, func() bool {
		var l coordinationv1.Lease
		if err := direct.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: leaseName}, &l); err != nil {
			return false
		}
		thief := "thief"
		l.Spec.HolderIdentity = &thief
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		return direct.Update(context.Background(), &l) == nil
	}, 10*time.Second, 10*time.Millisecond)

	var startErr error
	select {
	case startErr = <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30s of a lost Lease")
	}
	t.Logf("Start: %v", startErr)
	require.Error(t, startErr)
	assert.True(t, errors.Is(startErr, cm.ErrLeaseLost), "Start's error wraps the lost lease: %v", startErr)
	assert.Contains(t, startErr.Error(), name, "the fence failed, naming the reconciler that did not stop")
	deaf.free()
}
