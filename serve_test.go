package controllermanager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// serveInBackground runs m.Serve in a goroutine; the channel receives what
// it returned.
func serveInBackground(ctx context.Context, m *cm.ControllerManager, shutdownTimeout time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, time.Minute, shutdownTimeout) }()
	return done
}

func waitServe(t *testing.T, served <-chan error) error {
	t.Helper()
	return recvWithin(t, served, "Serve did not return")
}

// newStandby returns a manager whose Lease another holder keeps for an
// hour: it stays a standby, Start waiting in the election.
func newStandby(t *testing.T) (*cm.ControllerManager, *elController) {
	t.Helper()
	srv := leasetest.NewServer()
	holdLease(t, srv, "elsewhere")
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("standby")),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec("")}, "", cm.WithIdentity("standby"), elQuiet)
	require.NoError(t, err)
	ctrl := &elController{replica: "standby", name: "ctrl", activity: newElActivity(t)}
	m.Add(ctrl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m, ctrl
}

// holdLease creates the Lease, held by holder for an hour, as another
// replica would.
func holdLease(t *testing.T, srv *leasetest.Server, holder string) {
	t.Helper()
	now, hour := metav1.NowMicro(), int32(3600)
	_, err := srv.Client(holder).CoordinationV1().Leases(elNamespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: elLeaseName, Namespace: elNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &hour, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func waitHolderSeen(t *testing.T, m *cm.ControllerManager, holder string) {
	t.Helper()
	elEventually(t, "the standby sees "+holder+" hold the lease", func() bool {
		st, err := m.Status(t.Context())
		return err == nil && st.LeaderIdentity == holder
	})
}

// A standby stopped by its host (SIGTERM: Serve's context cancelled while
// Start waits for the lease) has done what it was asked: Serve returns nil,
// so the process exits 0, and nothing the lease guards ever ran.
func TestServeStandbyStoppedByItsContextReturnsNil(t *testing.T) {
	t.Parallel()
	m, ctrl := newStandby(t)
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	served := serveInBackground(ctx, m, elWait)
	waitHolderSeen(t, m, "elsewhere")

	sigterm()
	require.NoError(t, waitServe(t, served))
	select {
	case <-m.Done():
	default:
		t.Fatal("Serve returned before the manager had stopped")
	}
	runs, _ := ctrl.counts()
	assert.Zero(t, runs, "a standby ran a controller")
}

// Start itself keeps the seed's contract on a standby: a cancelled start is
// an error wrapping context.Canceled, worded without Go type names.
func TestStartCancelledOnStandbySaysSoInWords(t *testing.T) {
	t.Parallel()
	m, _ := newStandby(t)
	ctx, sigterm := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- m.Start(ctx, time.Minute) }()
	waitHolderSeen(t, m, "elsewhere")
	sigterm()
	err := waitServe(t, started)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "controllermanager: start abandoned, its context ended: context canceled", err.Error())
}

// A cause given to the cancellation is kept beside context.Canceled.
func TestStartCancelledWithACauseKeepsIt(t *testing.T) {
	t.Parallel()
	m, _ := newStandby(t)
	ctx, stop := context.WithCancelCause(context.Background())
	started := make(chan error, 1)
	go func() { started <- m.Start(ctx, time.Minute) }()
	waitHolderSeen(t, m, "elsewhere")
	sigterm := errors.New("SIGTERM")
	stop(sigterm)
	err := waitServe(t, started)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, sigterm)
	assert.Equal(t, "controllermanager: start abandoned, its context ended: context canceled: SIGTERM", err.Error())
}

// A leader stopped by its host returns nil, once every controller has shut
// down.
func TestServeRequestedStopReturnsNil(t *testing.T) {
	t.Parallel()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	ctrl := &elController{replica: "only", name: "ctrl", activity: newElActivity(t)}
	m.Add(ctrl)
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	served := serveInBackground(ctx, m, elWait)
	elEventually(t, "started", m.IsStarted)

	sigterm()
	require.NoError(t, waitServe(t, served))
	runs, shutdowns := ctrl.counts()
	assert.Equal(t, [2]int{1, 1}, [2]int{runs, shutdowns}, "runs, shutdowns")
	assert.NoError(t, m.Err())
}

// A leader whose lease is taken from it stops by itself: Serve returns
// without its context ending, with the lost lease.
func TestServeReturnsALostLease(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	m, err := cm.NewControllerManager(cm.NewContext(srv.Client("a")),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "", cm.WithIdentity("a"), elQuiet)
	require.NoError(t, err)
	m.Add(&elController{replica: "a", name: "ctrl", activity: newElActivity(t)})
	served := serveInBackground(context.Background(), m, elWait)
	elEventually(t, "started", m.IsStarted)

	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "thief", time.Hour))
	err = waitServe(t, served)
	require.ErrorIs(t, err, lease.ErrLost)
}

// A start that fails by itself is Serve's error, after the shutdown.
func TestServeReturnsAFailedStart(t *testing.T) {
	t.Parallel()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	boom := errors.New("no CRD installed")
	ctrl := &elController{replica: "only", name: "ctrl", activity: newElActivity(t)}
	ctrl.set(func(context.Context, int) error { return boom }, nil)
	m.Add(ctrl)
	err = waitServe(t, serveInBackground(context.Background(), m, elWait))
	require.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "controllermanager: start: ")
	assert.NotContains(t, err.Error(), "supervisor.")
}

// A controller that does not return from Shutdown within shutdownTimeout
// makes a requested stop an error: the process must not exit 0 with work
// that may still be running.
func TestServeReportsAControllerThatDidNotStop(t *testing.T) {
	t.Parallel()
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", elQuiet)
	require.NoError(t, err)
	release := make(chan struct{})
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), elWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	ctrl := &elController{replica: "only", name: "stuck", activity: newElActivity(t)}
	ctrl.set(nil, func(context.Context) { <-release }) // ignores its context
	m.Add(ctrl)
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	served := serveInBackground(ctx, m, 50*time.Millisecond)
	elEventually(t, "started", m.IsStarted)

	sigterm()
	err = waitServe(t, served)
	require.ErrorIs(t, err, cm.ErrUnstopped)
	assert.ErrorContains(t, err, `"stuck"`)
}

// A WebhookManager's Serve: its webhooks start, serve until ctx ends, shut
// down; nil after the requested stop.
func TestWebhookManagerServe(t *testing.T) {
	t.Parallel()
	m := cm.NewWebhookManager(cm.NewContext(nil), elQuiet)
	hook := testchild.NewWebhook("hook", "/hook", nil, nil)
	m.Add(hook)
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	served := make(chan error, 1)
	go func() { served <- m.Serve(ctx, elWait) }()
	elEventually(t, "started", m.IsStarted)
	require.NoError(t, m.GetReadiness())

	sigterm()
	require.NoError(t, waitServe(t, served))
	assert.Error(t, m.GetReadiness(), "ready after Serve returned")
	assert.NoError(t, m.Err())
}
