package ctrlruntime_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime"
)

// flakyRunnable is a manager.Runnable that fails its first start and runs
// until its context ends after that; each value may start only once.
type flakyRunnable struct {
	started atomic.Bool
	fail    bool
	running chan struct{}
}

func (r *flakyRunnable) Start(ctx context.Context) error {
	if r.started.Swap(true) {
		panic("started twice")
	}
	if r.fail {
		return errBoom
	}
	close(r.running)
	<-ctx.Done()
	return nil
}

// A failing manager.Runnable is restarted by the supervisor with a fresh
// value from its factory.
func TestRunnableRestartsWithAFreshValue(t *testing.T) {
	var built atomic.Int32
	running := make(chan struct{})
	r, err := ctrlruntime.NewRunnable("flaky", func() (manager.Runnable, error) {
		n := built.Add(1)
		return &flakyRunnable{fail: n == 1, running: running}, nil
	})
	require.NoError(t, err)
	_, ev := hostedManager(t, cm.NewContext(nil), r)
	<-running // the second value runs
	assert.Equal(t, int32(2), built.Load())
	// The failure is published to subscribers apart from the restart:
	// wait for its event rather than expect it to be there already.
	require.Eventually(t, func() bool { return len(ev.of("flaky", cm.ChildFailed)) > 0 }, 30*time.Second, time.Millisecond,
		"the first value's failure is published")
	require.Len(t, ev.of("flaky", cm.ChildFailed), 1)
	assert.ErrorIs(t, ev.of("flaky", cm.ChildFailed)[0].Err, errBoom)
	h := r.GetHealth()
	assert.True(t, h.Healthy, h.Message)
}

func TestRunnableBuildFailureFailsRun(t *testing.T) {
	r, err := ctrlruntime.NewRunnable("nobuild", func() (manager.Runnable, error) { panic("no") })
	require.NoError(t, err)
	err = r.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `runnable "nobuild": build panicked: no`)
}

// An admission.Handler answers through our Webhook, completed as
// controller-runtime's server completes it, and sees its request in its
// context.
func TestWebhookHandlesAnAdmissionRequest(t *testing.T) {
	h := admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		fromCtx, err := admission.RequestFromContext(ctx)
		if err != nil || fromCtx.UID != req.UID {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if req.Name == "forbidden" {
			return admission.Denied("no " + req.Name)
		}
		return admission.Allowed("")
	})
	w, err := ctrlruntime.NewWebhook("validate", "/validate", h)
	require.NoError(t, err)
	assert.False(t, w.Ready())
	require.NoError(t, w.Start(context.Background()))
	assert.True(t, w.Ready())

	tests := []struct {
		name    string
		allowed bool
		code    int32
	}{
		{"fine", true, http.StatusOK},
		{"forbidden", false, http.StatusForbidden},
	}
	for _, tt := range tests {
		resp, err := w.Handle(context.Background(), &admissionv1.AdmissionRequest{UID: types.UID("uid-" + tt.name), Name: tt.name})
		require.NoError(t, err)
		assert.Equal(t, types.UID("uid-"+tt.name), resp.UID, "the UID is the request's")
		assert.Equal(t, tt.allowed, resp.Allowed, tt.name)
		require.NotNil(t, resp.Result)
		assert.Equal(t, tt.code, resp.Result.Code, tt.name)
	}
	_, err = w.Handle(context.Background(), nil)
	assert.Error(t, err)
	w.Shutdown(context.Background())
	assert.False(t, w.Ready())
}

// The webhook is served by a WebhookManager's Handler.
func TestWebhookServedByAWebhookManager(t *testing.T) {
	w, err := ctrlruntime.NewWebhook("deny-all", "/deny", admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Denied("never")
	}))
	require.NoError(t, err)
	m := cm.NewWebhookManager(cm.NewContext(nil))
	m.Add(w)
	require.NoError(t, m.Start(context.Background()))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.ShutdownAndWait(ctx)
	}()
	assert.NoError(t, m.GetReadiness())
	assert.True(t, w.Ready())
}

// controller-runtime's metrics reach a registry of ours through the bridge.
func TestMetricsBridge(t *testing.T) {
	ctx, informers := fakeContext(t)
	r := &recorder{}
	c, err := ctrlruntime.NewControllerManagedBy(ctx).Named("metered").For(&corev1.ConfigMap{}).Build(r)
	require.NoError(t, err)
	require.NoError(t, c.Run(context.Background()))
	defer c.Shutdown(context.Background())
	inf, _ := informers.FakeInformerFor(context.Background(), &corev1.ConfigMap{})
	inf.Add(configMap("ns", "one"))
	require.Eventually(t, func() bool { return r.saw("one") }, 10*time.Second, 5*time.Millisecond)

	registry := prometheus.NewRegistry()
	require.NoError(t, ctrlruntime.RegisterMetrics(registry))
	require.Eventually(t, func() bool {
		families, err := registry.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != "controller_runtime_reconcile_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["controller"] == "metered" && labels["result"] == "success" && m.GetCounter().GetValue() >= 1 {
					return true
				}
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "controller_runtime_reconcile_total{controller=metered} on our registry")
}
