package controllermanager_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/supervisor"
)

// tenantCache is a furiko Store: a name and Recover.
type tenantCache struct{ name string }

func (c tenantCache) Name() string                  { return c.name }
func (c tenantCache) Recover(context.Context) error { return nil }

// tenantReconciler is a controller whose Run returns once its work runs.
type tenantReconciler struct{}

func (tenantReconciler) Name() string              { return "reconciler" }
func (tenantReconciler) Run(context.Context) error { return nil }
func (tenantReconciler) Shutdown(context.Context)  {}
func (tenantReconciler) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "reconciler", Healthy: true}
}

// A group per tenant: its store and the reconciler that reads it restart
// together (RestForOne), and a tenant that spends its own budget stops
// alone (ExhaustedStop). Tenants are added and removed while the manager
// runs; names are paths.
func ExampleNewGroup() {
	tenant := func(name string) *cm.Group {
		return cm.NewGroup(name, cm.SupervisionSpec{Strategy: cm.RestForOne, MaxRestarts: 3, OnExhausted: cm.ExhaustedStop},
			cm.StoreChild(tenantCache{name: "cache"}), tenantReconciler{})
	}
	mgr, _ := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	mgr.Add(tenant("tenant-a"))
	ctx := context.Background()
	_ = mgr.Start(ctx, 0)
	defer mgr.ShutdownAndWait(ctx)

	_ = mgr.AddChild(ctx, tenant("tenant-b")) // onboarded: started whole, its store first
	_ = mgr.RestartChild(ctx, "tenant-a")     // the whole group, in order
	_ = mgr.RemoveChild(ctx, "tenant-a")      // shut down and removed whole

	st, _ := mgr.Status(ctx)
	var print func(children []supervisor.ChildStatus, depth int)
	print = func(children []supervisor.ChildStatus, depth int) {
		for _, c := range children {
			line := fmt.Sprintf("%s%s %s %s", strings.Repeat("  ", depth), c.Name, c.Kind, c.State)
			if c.Group != nil {
				line += fmt.Sprintf(" (%s, %d restarts)", c.Group.Strategy, c.Group.MaxRestarts)
			}
			fmt.Println(line)
			print(c.Children, depth+1)
		}
	}
	print(st.Children, 0)
	// Output:
	// tenant-b group Running (RestForOne, 3 restarts)
	//   tenant-b/cache store Running
	//   tenant-b/reconciler controller Running
}
