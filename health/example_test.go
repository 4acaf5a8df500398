package health_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// jobsController is a controller that is always healthy.
type jobsController struct{}

func (jobsController) Run(context.Context) error { return nil }
func (jobsController) Shutdown(context.Context)  {}
func (jobsController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "jobs", Healthy: true}
}

// Mount the probes, and the manager's metrics, on the host's mux; in a pod
// this is the port the kubelet probes (see docs/observability.md).
func ExampleNewHandler() {
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "")
	if err != nil {
		panic(err)
	}
	m.Add(jobsController{})

	mux := http.NewServeMux()
	mux.Handle("/", health.NewHandler(m,
		health.WithMetrics(m.Gatherer()),
		health.WithReadyzCheck(health.Check("config", func(*http.Request) error { return nil })),
	))
	srv := httptest.NewServer(mux) // the host: http.ListenAndServe(":8081", mux)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	if err := m.Start(context.Background(), time.Minute); err != nil {
		panic(err)
	}
	defer m.ShutdownAndWait(context.Background())

	for _, path := range []string{"/readyz", "/readyz?verbose", "/healthz", "/healthz?verbose", "/livez?verbose", "/healthz/controller/jobs", "/healthz/controller/cron"} {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("GET %s → %d\n%s\n", path, res.StatusCode, body)
	}
	// Output:
	// GET /readyz → 200
	// ok
	// GET /readyz?verbose → 200
	// [+]manager ok
	// [+]config ok
	// readyz check passed
	//
	// GET /healthz → 200
	// ok
	// GET /healthz?verbose → 200
	// [+]phase ok
	// [+]controller/jobs ok
	// healthz check passed
	//
	// GET /livez?verbose → 200
	// [+]ping ok
	// [+]phase ok
	// livez check passed
	//
	// GET /healthz/controller/jobs → 200
	// ok
	// GET /healthz/controller/cron → 404
	// unknown healthz check "controller/cron"; the checks are: phase, controllers, controller/jobs
}
