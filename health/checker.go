package health

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"
)

// Checker is a named health check, like controller-runtime's
// healthz.Checker with its name attached. Check returns nil when healthy,
// else why not; it should return when req.Context() ends, which it does at
// the handler's timeout.
type Checker interface {
	Name() string
	Check(req *http.Request) error
}

// Check returns a Checker named name that calls fn. With a nil fn, NewHandler
// panics when given it as a host check (WithHealthzCheck), and it fails,
// saying so, wherever else it is run.
func Check(name string, fn func(req *http.Request) error) Checker {
	return funcChecker{name: name, fn: fn}
}

type funcChecker struct {
	name string
	fn   func(req *http.Request) error
}

func (c funcChecker) Name() string { return c.name }
func (c funcChecker) Check(req *http.Request) error {
	if c.fn == nil {
		return errNilFunc
	}
	return c.fn(req)
}

// errNilFunc is the failure of a Check whose func is nil.
var errNilFunc = errors.New("health.Check was given a nil func")

// The names of the built-in checks.
const (
	// PhaseCheck is the /healthz check of the manager's phase.
	PhaseCheck = "phase"
	// ControllersCheck names every controller's check at once.
	ControllersCheck = "controllers"
	// ControllerCheckPrefix prefixes the name of each controller's check.
	ControllerCheckPrefix = "controller/"
	// ManagerCheck is the /readyz check of the Source's GetReadiness.
	ManagerCheck = "manager"
	// PingCheck is the first /livez check: it passes whenever the handler
	// answers, as k8s.io/apiserver's ping does.
	PingCheck = "ping"
)

// validName reports why name cannot name a check of the host or of a
// CheckProvider, or nil.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty check name")
	case name == PhaseCheck || name == ControllersCheck || name == ManagerCheck:
		return fmt.Errorf("check name %q is reserved for a built-in check", name)
	case strings.HasPrefix(name, ControllerCheckPrefix):
		return fmt.Errorf("check name %q: the prefix %q is reserved for controllers", name, ControllerCheckPrefix)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("check name %q contains a space or a control character", name)
	}
	return nil
}
