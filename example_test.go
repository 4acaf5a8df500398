package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/supervisor"
)

// jobController is a furiko-style controller: Run starts its worker and
// returns; Shutdown stops the worker and waits for it.
type jobController struct {
	mu     sync.Mutex
	stop   context.CancelFunc
	done   chan struct{}
	report func(error)
}

func (c *jobController) Name() string { return "jobs" }

func (c *jobController) Run(ctx context.Context) error {
	// The context passed to Run carries the function that reports a failure
	// of the background work to the supervisor; keep it, Run returns now.
	report, _ := cm.FailureReporter(ctx)
	workCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.mu.Lock()
	c.stop, c.done, c.report = stop, done, report
	c.mu.Unlock()
	go func() { // the worker
		defer close(done)
		<-workCtx.Done()
	}()
	return nil
}

func (c *jobController) Shutdown(ctx context.Context) {
	c.mu.Lock()
	stop, done := c.stop, c.done
	c.mu.Unlock()
	stop()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (c *jobController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "jobs", Healthy: true}
}

// fail stands for the worker losing its watch: it reports the failure.
func (c *jobController) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(err)
}

// A service embeds a ControllerManager as furiko's controllermanager is
// embedded: add the components, Start, serve the probes, ShutdownAndWait.
func ExampleNewControllerManager() {
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{MaxRestarts: 3},
	}, "example-operator", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	mgr.Add(&jobController{})

	ctx := context.Background()
	if err := mgr.Start(ctx, time.Minute); err != nil {
		fmt.Println("start:", err)
		return
	}
	fmt.Println("started:", mgr.IsStarted(), "ready:", mgr.GetReadiness() == nil)
	fmt.Println("health:", mgr.GetHealth())

	mgr.ShutdownAndWait(ctx)
	fmt.Println("stopped, err:", mgr.Err())
	// Output:
	// started: true ready: true
	// health: [{jobs true }]
	// stopped, err: <nil>
}

// An invalid configuration fails in the constructor, naming every field at
// fault.
func ExampleNewControllerManager_invalidConfig() {
	enabled := true
	_, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{Enabled: &enabled, LeaseName: "Not_A_Name"},
		Supervision:    &cm.SupervisionSpec{InitialBackoff: metav1.Duration{Duration: -time.Second}},
	}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	msg := strings.TrimPrefix(err.Error(), "controllermanager: invalid config: ")
	for _, line := range strings.Split(msg, "\n") {
		field, _, _ := strings.Cut(line, ":")
		fmt.Println(field)
	}
	// Output:
	// supervision.initialBackoff
	// leaderElection.leaseName
	// leaderElection.enabled
}

// A controller's background work reports a failure through the function
// its Run context carried; the supervisor restarts that controller alone
// (Shutdown, a backoff, Run again). Subscribe shows each step.
func ExampleFailureReporter() {
	mgr, _ := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
		Supervision: &cm.SupervisionSpec{InitialBackoff: metav1.Duration{Duration: time.Millisecond}},
	}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	jobs := &jobController{}
	mgr.Add(jobs)

	restarted := make(chan struct{})
	mgr.Subscribe(func(e cm.Event) {
		switch e.Type {
		case cm.ChildFailed, cm.ChildStopped, cm.ChildRestarted:
			fmt.Println(e.Type, e.Child, "restarts:", e.Restarts)
		case cm.ChildStarted:
			if e.Restarts == 1 {
				fmt.Println(e.Type, e.Child, "restarts:", e.Restarts)
				close(restarted)
			}
		}
	})
	ctx := context.Background()
	_ = mgr.Start(ctx, 0)
	jobs.fail(errors.New("watch closed"))
	<-restarted
	mgr.ShutdownAndWait(ctx)
	// Output:
	// ChildFailed jobs restarts: 0
	// ChildStopped jobs restarts: 0
	// ChildRestarted jobs restarts: 1
	// ChildStarted jobs restarts: 1
	// ChildStopped jobs restarts: 1
}

// Lifecycle messages steer the tree while it runs; Request waits for each
// to take effect. An unknown name is an error reply, never a panic.
func ExampleBaseManager_Request() {
	mgr, _ := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	mgr.Add(&jobController{})
	ctx := context.Background()
	_ = mgr.Start(ctx, 0)
	defer mgr.ShutdownAndWait(ctx)

	if _, err := mgr.Request(ctx, supervisor.StopChild{Name: "jobs"}); err != nil {
		fmt.Println(err)
	}
	st, _ := mgr.Status(ctx)
	jobs, _ := st.Child("jobs")
	fmt.Println(st.Phase, jobs.Name, jobs.State)

	if _, err := mgr.Request(ctx, supervisor.StartChild{Name: "jobs"}); err != nil {
		fmt.Println(err)
	}
	if _, err := mgr.Request(ctx, supervisor.RestartChild{Name: "jobs"}); err != nil {
		fmt.Println(err)
	}
	st, _ = mgr.Status(ctx)
	jobs, _ = st.Child("jobs")
	fmt.Println(jobs.State, "restarts:", jobs.Restarts)

	_, err := mgr.Request(ctx, supervisor.RestartChild{Name: "nope"})
	fmt.Println(errors.Is(err, supervisor.ErrUnknownChild), err)
	// Output:
	// Running jobs Stopped
	// Running restarts: 2
	// true restart: supervisor: unknown child "nope"
}

// Serve is the whole host loop: Start, wait for ctx (SIGTERM, with
// signal.NotifyContext) or for the manager to stop by itself, shut down
// within the timeout, and return what the process's exit status should say:
// nil after a requested stop. Here the host's stop comes once the manager
// runs.
func ExampleControllerManager_Serve() {
	mgr, _ := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "example-operator",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	mgr.Add(&jobController{})

	ctx, sigterm := context.WithCancel(context.Background()) // signal.NotifyContext in a real host
	mgr.Subscribe(func(e cm.Event) {
		if e.Type == cm.PhaseChanged && e.Phase == cm.PhaseRunning {
			sigterm()
		}
	})
	err := mgr.Serve(ctx, time.Minute, 30*time.Second)
	fmt.Println("serve:", err)
	// Output:
	// serve: <nil>
}

// A standby stopped while it waits for the lease has done what was asked
// of it: Serve returns nil, and the process exits 0. (Start alone would
// return an error wrapping context.Canceled, as the seed's contract says.)
// The lease is held by another replica, on leasetest's in-memory API server.
func ExampleControllerManager_Serve_standby() {
	srv := leasetest.NewServer()
	holder, hour, now := "the-leader", int32(3600), metav1.NowMicro()
	_, _ = srv.Client(holder).CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "example-operator", Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &hour, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	enabled := true
	mgr, _ := cm.NewControllerManager(cm.NewContext(srv.Client("standby")), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{Enabled: &enabled, LeaseNamespace: "default"},
	}, "example-operator", cm.WithLogger(slog.New(slog.DiscardHandler)))
	jobs := &jobController{}
	mgr.Add(jobs)

	ctx, sigterm := context.WithCancel(context.Background())
	mgr.Subscribe(func(e cm.Event) {
		if e.Type == cm.PhaseChanged && e.Phase == cm.PhaseElecting {
			sigterm() // a rolling update stops the standby
		}
	})
	err := mgr.Serve(ctx, time.Minute, 30*time.Second)
	jobs.mu.Lock()
	ran := jobs.stop != nil
	jobs.mu.Unlock()
	fmt.Println("serve:", err, "controller ran:", ran)
	// Output:
	// serve: <nil> controller ran: false
}
