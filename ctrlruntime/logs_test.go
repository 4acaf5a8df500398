package ctrlruntime_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// lockedBuffer is a bytes.Buffer a logger may write from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// What a kubebuilder scaffold sees under either manager, with its
// development logger (zap's, as cmd/main.go builds it with
// Development: true) and its ping checks: readiness answers as soon as the
// probe server listens, with the same checks; controller-runtime's probe
// server and shutdown lines are logged; our own lines (protoactor's
// "actor system started", "phase changed") are quiet at that level.
func TestEnvLogsAndProbesAsControllerRuntime(t *testing.T) {
	cfg := testenv.Config(t)
	lines := []string{
		"Stopping and waiting for warmup runnables",
		"Stopping and waiting for non leader election runnables",
		"Stopping and waiting for leader election runnables",
		"Stopping and waiting for caches",
		"Stopping and waiting for webhooks",
		"Stopping and waiting for HTTP servers",
		"Wait completed, proceeding to shutdown the manager",
	}
	verbose := map[string]string{}
	for _, host := range []string{"controller-runtime", "ctrlruntime"} {
		t.Run(host, func(t *testing.T) {
			out := &lockedBuffer{}
			probeAddr := freeAddr(t)
			mgr := newHost(t, host, cfg, manager.Options{
				HealthProbeBindAddress: probeAddr,
				Logger:                 zap.New(zap.UseDevMode(true), zap.WriteTo(out)),
			})
			require.NoError(t, mgr.AddHealthzCheck("healthz", healthz.Ping))
			require.NoError(t, mgr.AddReadyzCheck("readyz", healthz.Ping))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stopped := make(chan error, 1)
			began := time.Now()
			go func() { stopped <- mgr.Start(ctx) }()
			var ready time.Duration
			require.Eventually(t, func() bool {
				code, _ := probe("http://" + probeAddr + "/readyz")
				ready = time.Since(began)
				return code == http.StatusOK
			}, time.Minute, time.Millisecond)
			t.Logf("FIGURE %s: Start to the first /readyz 200: %v", host, ready.Round(100*time.Microsecond))
			code, body := get(t, "http://"+probeAddr+"/readyz?verbose")
			assert.Equal(t, http.StatusOK, code)
			verbose[host] = body

			cancel()
			select {
			case err := <-stopped:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("Start did not return within a minute of its context's end")
			}
			logged := out.String()
			for _, line := range lines {
				if host == "controller-runtime" && line == lines[0] {
					// controller-runtime logs it from a goroutine that
					// its Start does not wait for (engageStopProcedure),
					// so on a busy machine Start returns before it is
					// written. Ours logs it before it stops anything.
					continue
				}
				assert.Contains(t, logged, line)
			}
			if host == "ctrlruntime" {
				// controller-runtime logs these on the global log.Log
				// (silenced in TestMain), which is the manager's logger
				// unless Options.Logger is set; ours on the manager's.
				for _, line := range []string{"starting server\t{\"name\": \"health probe\", \"addr\": \"" + probeAddr,
					"shutting down server\t{\"name\": \"health probe\", \"addr\": \"" + probeAddr} {
					assert.Contains(t, logged, line)
				}
			}
			for _, quiet := range []string{"actor system started", "phase changed"} {
				assert.NotContains(t, logged, quiet, "ours is quiet at a development logger's level")
			}
			if t.Failed() {
				t.Logf("logged:\n%s", logged)
			}
		})
	}
	assert.Equal(t, verbose["controller-runtime"], verbose["ctrlruntime"], "the same readiness checks")
	assert.NotContains(t, verbose["ctrlruntime"], "[+]caches")
}
