package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// writer is the controller a fencing test watches (--writer-configmap): a worker that
// patches one ConfigMap every --writer-every, its data naming this replica and a
// sequence number, as a naive controller writing its status would. With --writer-guard
// (the default), its clientset is fenced with GuardTransport from the lease guard of
// its Run's context, the recipe of the root package's docs; without, it writes through
// a plain clientset. Each write's outcome is journalled (journal.Write).
type writer struct {
	activity
	restConfig *rest.Config
	namespace  string
	configMap  string
	identity   string
	guarded    bool
	every      time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *writer) Name() string { return w.name }

func (w *writer) GetHealth() cm.HealthStatus { return cm.HealthStatus{Name: w.name, Healthy: true} }

func (w *writer) Run(ctx context.Context) error {
	n := w.runCalled()
	cfg := rest.CopyConfig(w.restConfig)
	cfg.QPS = -1 // one write per period, unthrottled: client-go's default is 5 per second
	if w.guarded {
		guard, ok := cm.LeaseGuard(ctx)
		if !ok {
			return fmt.Errorf("writer: the Run context carries no lease guard")
		}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(guard, rt) })
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.loop(loopCtx, client, n)
	}()
	w.mu.Lock()
	w.cancel, w.done = cancel, done
	w.mu.Unlock()
	w.write(journal.Running, n)
	return nil
}

func (w *writer) loop(ctx context.Context, client kubernetes.Interface, n int) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		patch := fmt.Sprintf(`{"data":{"writer":%q,"seq":%q}}`, w.identity, strconv.Itoa(seq))
		sent := time.Now()
		got, err := client.CoreV1().ConfigMaps(w.namespace).Patch(ctx, w.configMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		e := journal.Entry{Kind: journal.Write, Controller: w.name, Incarnation: n, Message: "seq " + strconv.Itoa(seq) + " sent " + sent.Format("15:04:05.000000")}
		if err != nil {
			// Journalled even when Shutdown cancelled it: a write cancelled in flight
			// may have been committed all the same.
			e.Err = err.Error()
		} else {
			e.Name = got.ResourceVersion
			e.Message += " rv " + got.ResourceVersion
		}
		w.rec.Write(e)
		if ctx.Err() != nil {
			return
		}
	}
}

func (w *writer) Shutdown(ctx context.Context) {
	n := w.current()
	w.write(journal.ShutdownCalled, n)
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.cancel, w.done = nil, nil
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	w.write(journal.Stopped, n)
}
