package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
	"github.com/actorkube/controllermanager/supervisor"
)

// The supervision of every tenant's group (--groups): RestForOne over [store,
// reconciler], so that a failed store restarts the reconciler that reads it;
// groupMaxRestarts restarts within the manager's window, then the group stops
// (ExhaustedStop) while the other tenants run on. The backoff is short so that a
// crash loop spends the budget in well under a second.
const (
	groupMaxRestarts     = 3
	groupInitialBackoff  = 20 * time.Millisecond
	groupMaxBackoff      = 100 * time.Millisecond
	crashAfterRecovering = 50 * time.Millisecond
)

// parseGroups splits --groups into tenant names, refusing an empty or repeated one
// and one with a "/" (a group's name is one element of a path).
func parseGroups(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		switch {
		case n == "":
			return nil, fmt.Errorf("--groups %q: an empty tenant name", list)
		case strings.Contains(n, "/"):
			return nil, fmt.Errorf("--groups %q: tenant %q has a \"/\"", list, n)
		}
		for _, seen := range names {
			if seen == n {
				return nil, fmt.Errorf("--groups %q: tenant %q twice", list, n)
			}
		}
		names = append(names, n)
	}
	return names, nil
}

// addGroups adds one group per tenant, "<tenant>" with the children
// "<tenant>/store" (a store that recovers by listing the tenant's ConfigMaps) and
// "<tenant>/reconciler" (a worker loop), each journalled under its path. The store of
// crashTenant, when set, reports a failure from its background work shortly after
// every Recover: a crash loop that spends the group's budget.
func addGroups(mgr *cm.ControllerManager, tenants []string, crashTenant string, client kubernetes.Interface, namespace string, rec *journal.Writer) {
	for _, tenant := range tenants {
		store := &tenantStore{
			activity: activity{name: tenant + "/store", rec: rec}, short: "store",
			client: client, namespace: namespace, tenant: tenant, crash: tenant == crashTenant,
		}
		reconciler := newTicker(tenant+"/reconciler", rec)
		mgr.Add(cm.NewGroup(tenant, cm.SupervisionSpec{
			Strategy:       cm.RestForOne,
			MaxRestarts:    groupMaxRestarts,
			InitialBackoff: metav1.Duration{Duration: groupInitialBackoff},
			MaxBackoff:     metav1.Duration{Duration: groupMaxBackoff},
			OnExhausted:    cm.ExhaustedStop,
		}, store, &pathNamed{Controller: reconciler, short: "reconciler"}))
	}
}

// pathNamed hosts a journalled controller, whose journal names it by its path, under
// its name within its group.
type pathNamed struct {
	cm.Controller
	short string
}

func (p *pathNamed) Name() string { return p.short }

// tenantStore is a tenant's store: Recover lists the tenant's ConfigMaps (label
// tenant=<tenant>) from the API server, as a cache would load its state; with crash
// it then fails from its background work, every incarnation.
type tenantStore struct {
	activity
	short     string
	client    kubernetes.Interface
	namespace string
	tenant    string
	crash     bool

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *tenantStore) Name() string { return s.short }

func (s *tenantStore) Recover(ctx context.Context) error {
	n := s.runCalled()
	if _, err := s.client.CoreV1().ConfigMaps(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: "tenant=" + s.tenant}); err != nil {
		return fmt.Errorf("store of %s: %w", s.tenant, err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if s.crash {
		report, _ := actors.FailureReporter(ctx)
		go func() {
			defer close(done)
			select {
			case <-loopCtx.Done():
			case <-time.After(crashAfterRecovering):
				report(errors.New("store of " + s.tenant + ": crashed (--crash-store)"))
			}
		}()
	} else {
		close(done)
	}
	s.mu.Lock()
	s.cancel, s.done = cancel, done
	s.mu.Unlock()
	s.write(journal.Running, n)
	return nil
}

func (s *tenantStore) Shutdown(ctx context.Context) {
	n := s.current()
	s.write(journal.ShutdownCalled, n)
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	s.write(journal.Stopped, n)
}

// stopGroupWhenRunning stops the group tenant by request (StopChild) once this
// replica leads, runs, and the group is running, and journals the call's result
// (journal.GroupStopRequested).
func stopGroupWhenRunning(ctx context.Context, mgr *cm.ControllerManager, tenant string, every time.Duration, rec *journal.Writer) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-mgr.Done():
			return
		case <-tick.C:
		}
		askCtx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := mgr.Status(askCtx)
		cancel()
		if err != nil {
			continue
		}
		// The phase too: a group reads Running in Status as soon as its store has
		// recovered, before its reconciler has started, and StopChild is refused
		// until the manager runs.
		if g, ok := st.Child(tenant); !ok || g.State != supervisor.StateRunning || st.Phase != cm.PhaseRunning {
			continue
		}
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = mgr.StopChild(stopCtx, tenant)
		cancel()
		e := journal.Entry{Kind: journal.GroupStopRequested, Child: tenant}
		if err != nil {
			e.Err = err.Error()
		}
		rec.Write(e)
		return
	}
}

// groupStates tracks the groups' states in Status, to journal each change
// (journal.GroupState).
type groupStates map[string]journal.Entry

// observe journals every group of st whose state, budget spent or exhaustion
// changed since the last call.
func (g groupStates) observe(st cm.Status, rec *journal.Writer) {
	for _, c := range st.Children {
		if c.Kind != actors.KindGroup || c.Group == nil {
			continue
		}
		e := journal.Entry{Kind: journal.GroupState, Child: c.Name, Type: string(c.State), Restarts: c.Group.Spent}
		if c.Group.Exhausted {
			e.Message = journal.GroupExhausted
		}
		if c.LastError != nil {
			e.Err = c.LastError.Error()
		}
		if last, ok := g[c.Name]; ok && last.Type == e.Type && last.Restarts == e.Restarts && last.Message == e.Message {
			continue
		}
		rec.Write(e)
		g[c.Name] = e
	}
}
