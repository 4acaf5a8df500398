package liveview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// jobsController is a controller that is always healthy.
type jobsController struct{}

func (jobsController) Run(context.Context) error { return nil }
func (jobsController) Shutdown(context.Context)  {}
func (jobsController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "jobs", Healthy: true}
}

// Serve the live view on a loopback listener of its own, apart from the
// probes and the webhooks: it shows error messages and panic stacks. Open
// http://127.0.0.1:8082/debug/supervision/ in a browser; status.json is
// the same data for a script.
func ExampleHandler() {
	m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "")
	if err != nil {
		panic(err)
	}
	m.Add(jobsController{})
	if err := m.Start(context.Background(), time.Minute); err != nil {
		panic(err)
	}
	defer m.ShutdownAndWait(context.Background())

	view := liveview.Handler(m) // controls off; liveview.WithControls(token) turns them on
	defer view.Close()
	mux := http.NewServeMux()
	mux.Handle(liveview.DefaultPrefix+"/", view)
	srv := httptest.NewServer(mux) // the host: http.ListenAndServe("127.0.0.1:8082", mux)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	res, err := srv.Client().Get(srv.URL + liveview.DefaultPrefix + "/status.json")
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var st liveview.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, st.Phase, "controls:", st.Controls.Enabled)
	for _, c := range st.Children {
		fmt.Println(c.Name, c.Kind, c.State, "incarnation", c.Incarnation)
	}
	// Output:
	// 200 Running controls: false
	// jobs controller Running incarnation 1
}
