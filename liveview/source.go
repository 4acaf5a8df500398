package liveview

import (
	"context"
	"net/http"
	"reflect"

	"github.com/actorkube/controllermanager/supervisor"
)

// Source is what the live view needs of a manager: its Status, its event
// stream and its lifecycle messages. Both managers of package
// controllermanager implement it (their Status, Subscribe and Request).
//
// Subscribe must call fn on a goroutine of its own and never stall the
// publisher on it (a manager's does: each subscriber has its own queue);
// the handler's fn returns at once in any case.
//
// A Source may also have a Done() <-chan struct{} (health.Stopper): the
// event stream then ends with "end" once it is closed. And it may have
// health.CheckProvider's HealthzChecks: the page shows the outcome of its
// "leaderElection" check (the lease watchdog) as the lease's renewal.
type Source interface {
	Status(ctx context.Context) (supervisor.Status, error)
	Subscribe(fn func(supervisor.Event)) (cancel func())
	Request(ctx context.Context, msg any) (any, error)
}

// stopper is the part of health.Stopper the event stream uses.
type stopper interface {
	Done() <-chan struct{}
}

// checker is health.Checker's method set.
type checker interface {
	Name() string
	Check(req *http.Request) error
}

// healthzChecks returns the checks of src's HealthzChecks method
// (health.CheckProvider), and whether it has one.
//
// Package health imports this one (its deprecated Debug* names are aliases
// of this package's), so this one cannot import health, and a type
// assertion to health.CheckProvider would have to name health.Checker. The
// method is found by name instead, and each check it returns is used
// through its two methods; one that has not both, or is nil, is skipped.
func healthzChecks(src any) ([]checker, bool) {
	m := reflect.ValueOf(src).MethodByName("HealthzChecks")
	if !m.IsValid() {
		return nil, false
	}
	t := m.Type()
	if t.NumIn() != 0 || t.NumOut() != 1 || t.Out(0).Kind() != reflect.Slice {
		return nil, false
	}
	list := m.Call(nil)[0]
	checks := make([]checker, 0, list.Len())
	for i := range list.Len() {
		el := list.Index(i)
		if el.Kind() == reflect.Interface && el.IsNil() {
			continue
		}
		if c, ok := el.Interface().(checker); ok {
			checks = append(checks, c)
		}
	}
	return checks, true
}
