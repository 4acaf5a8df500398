// Command fleet runs a fleet of member clusters in a manager that has no
// cluster at all: each member's API server is an in-process stand-in (an
// httptest server whose /readyz can be made to fail), and an inventory
// (a ClusterProvider of a dozen lines) engages and disengages them.
//
// Once the manager runs, it tells a story in five steps, printing the
// supervision tree and the members' states after each:
//
//  1. started: east and west are Online; moon does not answer and starts
//     Offline, and the manager is Running all the same;
//  2. north is engaged at run time;
//  3. west is disengaged: its subtree is shut down and removed;
//  4. east's API server fails its probes: past FailureThreshold east goes
//     Offline, its subtree stopped, while north reconciles on;
//  5. east answers again: after SuccessThreshold it is Online, its
//     subtree started again.
//
// Then it shuts down cleanly (exit status 0):
//
//	go run ./examples/fleet
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// spec makes the story quick: probes every 100 ms, Offline after 300 ms of
// failures, Online again after 200 ms of answers (the defaults are 10 s,
// 30 s and 30 s). A probe may take the whole period: a loaded machine
// (a race build) must not make the stand-ins look down.
var spec = cm.FleetSpec{
	ProbePeriod:      metav1.Duration{Duration: 100 * time.Millisecond},
	ProbeTimeout:     metav1.Duration{Duration: 100 * time.Millisecond},
	FailureThreshold: metav1.Duration{Duration: 300 * time.Millisecond},
	SuccessThreshold: metav1.Duration{Duration: 200 * time.Millisecond},
}

// run tells the story, printing to out.
func run(ctx context.Context, out io.Writer) error {
	members := map[string]*member{}
	for _, name := range []string{"east", "west", "north"} {
		members[name] = newMember()
		defer members[name].close()
	}
	inv := newInventory(map[string]*rest.Config{
		"east": members["east"].config(),
		"west": members["west"].config(),
		"moon": {Host: "http://127.0.0.1:1"}, // nobody there
	})
	fleet := cm.NewFleet("fleet", inv, func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{&reconciler{cluster: c}}
	}, spec)

	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "",
		cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	mgr.Add(fleet)
	events := newEventLog()
	defer mgr.Subscribe(events.record)()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mgr.ShutdownAndWait(sctx)
	}()
	if err := mgr.Start(ctx, 10*time.Second); err != nil {
		return err
	}

	s := story{mgr: mgr, fleet: fleet, events: events, out: out}
	steps := []struct {
		heading string
		act     func()
		wait    []want
	}{
		{"1. started: east and west Online, moon unreachable (Offline), the manager Running", func() {},
			[]want{{cm.ClusterOnline, "east"}, {cm.ClusterOnline, "west"}, {cm.ClusterOffline, "moon"}}},
		{"2. north engaged at run time", func() { inv.engage("north", members["north"].config()) },
			[]want{{cm.ClusterOnline, "north"}}},
		{"3. west disengaged: its subtree removed", func() { inv.disengage("west") },
			[]want{{cm.ClusterDisengaged, "west"}}},
		{"4. east's API server fails: east Offline, its subtree stopped", func() { members["east"].failing.Store(true) },
			[]want{{cm.ClusterOffline, "east"}}},
		{"5. east answers again: Online, its subtree started again", func() { members["east"].failing.Store(false) },
			[]want{{cm.ClusterOnline, "east"}}},
	}
	for _, step := range steps {
		step.act()
		for _, w := range step.wait {
			if err := events.wait(ctx, w.typ, "fleet/"+w.cluster); err != nil {
				_ = s.print(context.Background(), "failed: "+step.heading)
				return fmt.Errorf("%s: %w", step.heading, err)
			}
		}
		if err := s.print(ctx, step.heading); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "shutting down")
	return nil
}

type want struct {
	typ     cm.EventType
	cluster string
}

// member stands in for a member cluster's API server.
type member struct {
	srv     *httptest.Server
	failing atomic.Bool
}

func newMember() *member {
	m := &member{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && m.failing.Load() {
			http.Error(w, "[-]etcd failed: connection refused", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	return m
}

func (m *member) config() *rest.Config { return &rest.Config{Host: m.srv.URL} }
func (m *member) close()               { m.srv.Close() }

// inventory is a ClusterProvider: the clusters it knows, engaged when its
// Run starts and whenever they change.
type inventory struct {
	mu       sync.Mutex
	clusters map[string]*rest.Config
	engageFn func(string, *rest.Config) error
	leaveFn  func(string)
}

func newInventory(clusters map[string]*rest.Config) *inventory {
	return &inventory{clusters: clusters}
}

// Run engages every cluster known, then the changes, until ctx ends.
func (inv *inventory) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	inv.mu.Lock()
	inv.engageFn, inv.leaveFn = engage, disengage
	var errs []error
	for name, cfg := range inv.clusters {
		errs = append(errs, engage(name, cfg))
	}
	inv.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (inv *inventory) engage(name string, cfg *rest.Config) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.clusters[name] = cfg
	if inv.engageFn != nil {
		_ = inv.engageFn(name, cfg)
	}
}

func (inv *inventory) disengage(name string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	delete(inv.clusters, name)
	if inv.leaveFn != nil {
		inv.leaveFn(name)
	}
}

// reconciler is each member's controller: it counts its passes until
// Shutdown. A real one would start informers on cluster.Client().
type reconciler struct {
	cluster cm.Cluster
	passes  atomic.Int64
	stop    context.CancelFunc
	done    chan struct{}
}

func (r *reconciler) Name() string { return "reconciler" }

func (r *reconciler) Run(ctx context.Context) error {
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.cluster.Context().Done():
				return
			case <-t.C:
				r.passes.Add(1)
			}
		}
	}()
	return nil
}

func (r *reconciler) Shutdown(ctx context.Context) {
	if r.stop == nil {
		return
	}
	r.stop()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

func (r *reconciler) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "reconciler", Healthy: true, Message: fmt.Sprintf("%d passes", r.passes.Load())}
}

// story prints the tree after each step.
type story struct {
	mgr    *cm.ControllerManager
	fleet  *cm.Fleet
	events *eventLog
	out    io.Writer
}

func (s story) print(ctx context.Context, heading string) error {
	st, err := s.mgr.Status(ctx)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n== %s\nphase %s\n", heading, st.Phase)
	var walk func(cs []cm.ChildStatus, depth int)
	walk = func(cs []cm.ChildStatus, depth int) {
		for _, c := range cs {
			fmt.Fprintf(&b, "%s%-22s %-10s %s\n", strings.Repeat("  ", depth), c.Name, c.Kind, c.State)
			walk(c.Children, depth+1)
		}
	}
	walk(st.Children, 0)
	clusters := s.fleet.Clusters()
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })
	for _, c := range clusters {
		line := fmt.Sprintf("cluster %-6s %s", c.Name, c.State)
		if c.Err != nil {
			line += ": " + firstLine(c.Err.Error())
		}
		fmt.Fprintln(&b, line)
	}
	_, err = io.WriteString(s.out, b.String())
	return err
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// eventLog keeps the events, so that a step waits for one that may have
// come already.
type eventLog struct {
	mu     sync.Mutex
	seen   []cm.Event
	notify chan struct{}
}

func newEventLog() *eventLog { return &eventLog{notify: make(chan struct{}, 1)} }

func (l *eventLog) record(e cm.Event) {
	l.mu.Lock()
	l.seen = append(l.seen, e)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// wait returns once an event of typ for child has come since the last
// wait for the same pair.
func (l *eventLog) wait(ctx context.Context, typ cm.EventType, child string) error {
	for {
		l.mu.Lock()
		for i, e := range l.seen {
			if e.Type == typ && e.Child == child {
				l.seen = append(l.seen[:i:i], l.seen[i+1:]...)
				l.mu.Unlock()
				return nil
			}
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s of %s: %w", typ, child, ctx.Err())
		case <-l.notify:
		}
	}
}
