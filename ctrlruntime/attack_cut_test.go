package ctrlruntime_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actorkube/controllermanager/ctrlruntime"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// cutLink is a network between a client and its API server that can be
// cut: a request sent while cut gets no answer until its context ends or
// the link heals (a request with no context, as controller-runtime's
// discovery, hangs until then).
type cutLink struct {
	mu   sync.Mutex
	cut  bool
	heal chan struct{}
}

func newCutLink(t *testing.T, config *rest.Config) *cutLink {
	l := &cutLink{heal: make(chan struct{})}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			l.mu.Lock()
			cut, heal := l.cut, l.heal
			l.mu.Unlock()
			if cut {
				select {
				case <-heal:
				case <-r.Context().Done():
					return nil, r.Context().Err()
				}
			}
			return rt.RoundTrip(r)
		})
	})
	t.Cleanup(func() { l.set(false) })
	return l
}

func (l *cutLink) set(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cut == l.cut {
		return
	}
	l.cut = cut
	if !cut {
		close(l.heal)
		l.heal = make(chan struct{})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startElectedBehindCutLink starts a manager whose API server is reached
// through a link the test can cut, and waits until it is elected; cancel
// ends Start's context, and stopped receives what Start returned.
func startElectedBehindCutLink(t *testing.T) (*ctrlruntime.Manager, *cutLink, context.CancelFunc, <-chan error) {
	t.Helper()
	config := testenv.Config(t)
	link := newCutLink(t, config)
	mgr, err := ctrlruntime.NewManager(config, manager.Options{Metrics: metricsserver.Options{BindAddress: "0"},
		GracefulShutdownTimeout: ptr.To(time.Second)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	select {
	case <-mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("not elected within a minute")
	}
	return mgr, link, cancel, stopped
}

// A kind warmed after Start (what a Complete after Start does first, for
// a plugin enabled at run time) while the API server does not answer:
// Warm returns at once, as its doc says (the informer starts in the
// background), not once controller-runtime's context-less discovery gives
// up; and the manager still stops within its bound.
func TestEnvAttackWarmAfterStartDuringCut(t *testing.T) {
	mgr, link, cancel, stopped := startElectedBehindCutLink(t)
	link.set(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		mgr.Context().Warm(&corev1.ConfigMap{})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		link.set(false)
		<-done
		t.Fatal("Warm after Start held its caller on the unanswering API server")
	}
	cancel()
	start := time.Now()
	select {
	case <-stopped:
		t.Logf("stopped in %v, the link still cut", time.Since(start))
	case <-time.After(time.Minute):
		t.Error("Start did not return within a minute of its context's end")
	}
	link.set(false)
}

// A reconciler registered after Start while the API server does not
// answer, and the manager stopped meanwhile: Complete (which, after
// Start, waits for the controller's start, its caches synced, for up to
// DefaultCacheSyncTimeout) returns once the manager has stopped, not at
// that timeout.
func TestEnvAttackStopWhileCompleteAfterStartWaits(t *testing.T) {
	mgr, link, cancel, stopped := startElectedBehindCutLink(t)
	link.set(true)
	done := make(chan error, 1)
	go func() {
		done <- ctrlruntime.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	}()
	select {
	case err := <-done:
		t.Logf("Complete returned before the stop: %v", err)
	case <-time.After(time.Second):
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Error("Start did not return within a minute of its context's end")
	}
	select {
	case err := <-done:
		t.Logf("Complete: %v", err)
	case <-time.After(10 * time.Second):
		link.set(false)
		<-done
		t.Fatal("Complete still waited 10 s after the manager stopped")
	}
	link.set(false)
}
