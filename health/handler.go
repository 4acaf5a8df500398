package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/supervisor"

	"github.com/actorkube/controllermanager/internal/respond"
)

// handler serves the probes of one Source.
type handler struct {
	src     Source
	timeout time.Duration // each check's deadline
	budget  time.Duration // how long a request waits for its checks: timeout plus a margin
	healthz []Checker     // the host's
	readyz  []Checker
	livez   []Checker
	metrics http.Handler // nil without WithMetrics
	pprof   http.Handler // nil without WithPprof

	health shared[[]actors.HealthStatus]
	ready  shared[error]
	status shared[statusAnswer]
	guards sync.Map // check name → *guard, per endpoint: "healthz/name"
}

type statusAnswer struct {
	status supervisor.Status
	err    error
}

// endpoint is /healthz, /livez or /readyz.
type endpoint struct {
	name     string // "healthz", "livez" or "readyz"
	failCode int    // the status code of a failed probe
}

var (
	healthzEndpoint = endpoint{name: "healthz", failCode: http.StatusInternalServerError}
	livezEndpoint   = endpoint{name: "livez", failCode: http.StatusInternalServerError}
	readyzEndpoint  = endpoint{name: "readyz", failCode: http.StatusServiceUnavailable}
	endpoints       = []endpoint{healthzEndpoint, livezEndpoint, readyzEndpoint}
)

// NewHandler returns the handler of src's probes: /healthz, /livez, /readyz
// and their single checks, and /metrics and /debug/pprof/ when the options ask
// for them; see the package doc for the endpoints, the checks and the
// deadlines. Mount it at the root of a mux, or under a prefix with
// http.StripPrefix.
//
// NewHandler panics when src is nil (a nil *ControllerManager too), a host
// check is nil or misnamed (WithHealthzCheck says how) or WithTimeout is
// negative, as http.ServeMux.Handle does on a bad
// pattern: these are programming errors, found at startup.
func NewHandler(src Source, opts ...Option) http.Handler {
	switch {
	case src == nil:
		panic("health: NewHandler: nil Source")
	case nilPointer(src):
		panic(fmt.Sprintf("health: NewHandler: nil Source (%T)", src))
	}
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	var negative error
	if c.timeout < 0 {
		negative = fmt.Errorf("WithTimeout: must not be negative, got %s", c.timeout)
	}
	if err := errors.Join(negative, validateChecks("WithHealthzCheck", c.healthz), validateChecks("WithReadyzCheck", c.readyz),
		validateLivez(c.livez)); err != nil {
		panic(fmt.Sprintf("health: NewHandler: %v", err))
	}
	timeout := c.timeout
	if ts, ok := src.(TimeoutSource); ok && timeout <= 0 {
		timeout = ts.HealthTimeout()
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	h := &handler{src: src, timeout: timeout, budget: timeout + margin(timeout), healthz: c.healthz, readyz: c.readyz, livez: c.livez}
	if c.gatherer != nil {
		h.metrics = MetricsHandler(c.gatherer)
	}
	if c.pprof {
		h.pprof = newPprofHandler()
	}
	return h
}

// nilPointer reports whether v is a nil pointer in a non-nil interface: a
// manager never assigned, whose methods would dereference nil.
func nilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// margin is how long past the checks' deadline a request waits for them,
// so that a Source bounded by the same timeout can report its own silence.
func margin(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 50*time.Millisecond), time.Second)
}

func validateChecks(option string, checks []Checker) error {
	var errs []error
	seen := map[string]bool{}
	for i, c := range checks {
		switch {
		case c == nil:
			errs = append(errs, fmt.Errorf("%s: check #%d is nil", option, i))
			continue
		case nilPointer(c):
			errs = append(errs, fmt.Errorf("%s: check #%d is nil (%T)", option, i, c))
			continue
		}
		if fc, ok := c.(funcChecker); ok && fc.fn == nil {
			errs = append(errs, fmt.Errorf("%s: check %q: %w", option, fc.name, errNilFunc))
		}
		name := c.Name()
		if err := validName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", option, err))
		} else if seen[name] {
			errs = append(errs, fmt.Errorf("%s: check name %q is used twice", option, name))
		}
		seen[name] = true
	}
	return errors.Join(errs...)
}

// validateLivez validates the host's /livez checks: the rules of the other
// endpoints, and PingCheck is taken too.
func validateLivez(checks []Checker) error {
	err := validateChecks("WithLivezCheck", checks)
	for _, c := range checks {
		if c != nil && !nilPointer(c) && c.Name() == PingCheck {
			err = errors.Join(err, fmt.Errorf("WithLivezCheck: check name %q is reserved for a built-in check", PingCheck))
		}
	}
	return err
}

// ServeHTTP routes the request to its endpoint.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	for _, ep := range endpoints {
		root := "/" + ep.name
		switch {
		case path == root || path == root+"/":
			h.serveProbe(w, r, ep, "")
			return
		case strings.HasPrefix(path, root+"/"):
			h.serveProbe(w, r, ep, strings.TrimPrefix(path, root+"/"))
			return
		}
	}
	switch {
	case path == "/metrics" && h.metrics != nil:
		// Read-only, as the probes: MetricsHandler answers other methods 405
		// (docs/observability.md).
		h.metrics.ServeHTTP(w, r)
	case (path == "/debug/pprof" || strings.HasPrefix(path, "/debug/pprof/")) && h.pprof != nil:
		h.pprof.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

// probe is one check an endpoint may run.
type probe struct {
	name  string // ControllersCheck for the controllers' check, which expands to one per controller
	start func(r *http.Request) *pending
}

// probes lists the checks of ep, in order.
func (h *handler) probes(ep endpoint) []probe {
	if ep == readyzEndpoint {
		ps := []probe{{name: ManagerCheck, start: h.startReadiness}}
		return h.appendCheckers(ps, ep, h.readyz)
	}
	var ps []probe
	if ep == livezEndpoint {
		ps = append(ps, probe{name: PingCheck, start: func(*http.Request) *pending { return settled(outcome{name: PingCheck}) }})
	}
	_, stops := h.src.(Stopper)
	_, reports := h.src.(StatusSource)
	if stops || reports {
		ps = append(ps, probe{name: PhaseCheck, start: h.startPhase})
	}
	if ep == livezEndpoint {
		// Liveness leaves the controllers out: the supervisor restarts an
		// unhealthy controller itself, and a kubelet restarting the pod for
		// it would undo the restart budget.
		if cp, ok := h.src.(CheckProvider); ok {
			ps = h.appendCheckers(ps, ep, cp.HealthzChecks())
		}
		return h.appendCheckers(ps, ep, h.livez)
	}
	ps = append(ps, probe{name: ControllersCheck, start: h.startControllers})
	if cp, ok := h.src.(CheckProvider); ok {
		ps = h.appendCheckers(ps, ep, cp.HealthzChecks())
	}
	return h.appendCheckers(ps, ep, h.healthz)
}

// appendCheckers adds checks, skipping those whose name is invalid or taken
// (only a CheckProvider's can be: the host's are validated by NewHandler).
func (h *handler) appendCheckers(ps []probe, ep endpoint, checks []Checker) []probe {
	for _, c := range checks {
		if c == nil {
			continue
		}
		name := c.Name()
		if validName(name) != nil || hasProbe(ps, name) {
			continue
		}
		g := h.guard(ep.name + "/" + name)
		ps = append(ps, probe{name: name, start: func(r *http.Request) *pending {
			return startChecker(c, name, g, r, h.timeout)
		}})
	}
	return ps
}

func hasProbe(ps []probe, name string) bool {
	for _, p := range ps {
		if p.name == name {
			return true
		}
	}
	return false
}

func (h *handler) guard(key string) *guard {
	if g, ok := h.guards.Load(key); ok {
		return g.(*guard)
	}
	g, _ := h.guards.LoadOrStore(key, &guard{})
	return g.(*guard)
}

// startReadiness runs the Source's GetReadiness.
func (h *handler) startReadiness(*http.Request) *pending {
	f := h.ready.start(h.src.GetReadiness)
	return &pending{done: f.done, result: func() []outcome {
		err := f.val
		if f.err != nil {
			err = fmt.Errorf("GetReadiness: %w", f.err)
		}
		return []outcome{{name: ManagerCheck, err: err}}
	}, expire: func() []outcome {
		return []outcome{{name: ManagerCheck, err: noAnswer("GetReadiness", h.budget)}}
	}}
}

// startControllers runs the Source's GetHealth: one outcome per controller.
func (h *handler) startControllers(*http.Request) *pending {
	f := h.health.start(h.src.GetHealth)
	return &pending{done: f.done, result: func() []outcome {
		if f.err != nil {
			return []outcome{{name: ControllersCheck, err: fmt.Errorf("GetHealth: %w", f.err)}}
		}
		out := make([]outcome, len(f.val))
		for i := range f.val {
			st := &f.val[i]
			out[i] = outcome{name: ControllerCheckPrefix + st.Name, status: st}
			if !st.Healthy {
				msg := st.Message
				if msg == "" {
					msg = "unhealthy"
				}
				out[i].err = errors.New(msg)
			}
		}
		return out
	}, expire: func() []outcome {
		return []outcome{{name: ControllersCheck, err: noAnswer("GetHealth", h.budget)}}
	}}
}

// startPhase checks that the manager has not stopped and that its
// supervisor answers.
func (h *handler) startPhase(*http.Request) *pending {
	if s, ok := h.src.(Stopper); ok {
		select {
		case <-s.Done():
			return settled(outcome{name: PhaseCheck, err: stoppedError(s.Err())})
		default:
		}
	}
	ss, ok := h.src.(StatusSource)
	if !ok {
		return settled(outcome{name: PhaseCheck, message: "not stopped"})
	}
	f := h.status.start(func() statusAnswer {
		ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
		defer cancel()
		st, err := ss.Status(ctx)
		return statusAnswer{status: st, err: err}
	})
	return &pending{done: f.done, result: func() []outcome {
		o := outcome{name: PhaseCheck}
		switch a := f.val; {
		case f.err != nil:
			o.err = fmt.Errorf("Status: %w", f.err)
		case a.err != nil:
			o.err = fmt.Errorf("the supervisor did not answer: %w", a.err)
		case a.status.Phase == supervisor.PhaseFailed:
			o.err = stoppedError(a.status.Err)
			if a.status.Err == nil {
				o.err = errors.New("manager failed")
			}
		case a.status.Phase == supervisor.PhaseStopped:
			o.err = stoppedError(nil)
		default:
			o.message = string(a.status.Phase)
		}
		return []outcome{o}
	}, expire: func() []outcome {
		return []outcome{{name: PhaseCheck, err: noAnswer("the supervisor", h.budget)}}
	}}
}

// serveProbe serves ep: every check when only is empty, else the check
// named only.
func (h *handler) serveProbe(w http.ResponseWriter, r *http.Request, ep endpoint, only string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		respond.Text(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on /%s: use GET or HEAD\n", r.Method, ep.name))
		return
	}
	if only != "" {
		h.serveOne(w, r, ep, only)
		return
	}
	query := r.URL.Query()
	_, verbose := query["verbose"]
	excluded := newExclusions(query["exclude"])
	var ps []*pending
	for _, p := range h.probes(ep) {
		if excluded.take(p.name) {
			ps = append(ps, settled(outcome{name: p.name, excluded: true}))
			continue
		}
		ps = append(ps, p.start(r))
	}
	outs, ok := await(r.Context(), ps, h.budget)
	if !ok {
		return // the client has gone
	}
	for i := range outs {
		if outs[i].status != nil && excluded.take(outs[i].name) {
			outs[i].excluded = true
		}
	}
	rep := newReport(outs)
	code := http.StatusOK
	if !rep.Healthy {
		code = ep.failCode
	}
	switch {
	case acceptsJSON(r):
		respond.JSON(w, code, rep)
	case verbose || !rep.Healthy:
		// As k8s.io/apiserver: a failure is always listed, its reasons
		// withheld unless ?verbose asks for them.
		respond.Text(w, code, listing(ep, outs, excluded.unmatched(), verbose))
	default:
		respond.Text(w, code, "ok")
	}
}

// serveOne serves the check named name of ep, or 404.
func (h *handler) serveOne(w http.ResponseWriter, r *http.Request, ep endpoint, name string) {
	ps := h.probes(ep)
	var target *probe
	for i := range ps {
		if ps[i].name == name || (ps[i].name == ControllersCheck && strings.HasPrefix(name, ControllerCheckPrefix)) {
			target = &ps[i]
			break
		}
	}
	if target == nil {
		h.unknownCheck(w, ep, name, ps, nil)
		return
	}
	outs, ok := await(r.Context(), []*pending{target.start(r)}, h.budget)
	if !ok {
		return
	}
	if strings.HasPrefix(name, ControllerCheckPrefix) && !(len(outs) == 1 && outs[0].status == nil) {
		// A controller's check: find it among the answers, unless the
		// controllers' check failed as a whole.
		var found []outcome
		for _, o := range outs {
			if o.name == name {
				found = append(found, o)
			}
		}
		if len(found) == 0 {
			h.unknownCheck(w, ep, name, ps, outs)
			return
		}
		outs = found
	}
	var reasons []string
	for _, o := range outs {
		switch {
		case o.err == nil:
		case o.name == name:
			reasons = append(reasons, flatten(o.err.Error()))
		default: // one controller of the controllers' check
			reasons = append(reasons, o.name+": "+flatten(o.err.Error()))
		}
	}
	if len(reasons) > 0 {
		respond.Text(w, ep.failCode, fmt.Sprintf("%s check failed: %s\n", name, strings.Join(reasons, "; ")))
		return
	}
	respond.Text(w, http.StatusOK, "ok")
}

// unknownCheck answers 404, naming the checks there are (outs: the
// controllers' answers, when known).
func (h *handler) unknownCheck(w http.ResponseWriter, ep endpoint, name string, ps []probe, outs []outcome) {
	var known []string
	for _, p := range ps {
		known = append(known, p.name)
	}
	for _, o := range outs {
		if o.status != nil {
			known = append(known, o.name)
		}
	}
	const show = 20
	list := strings.Join(known[:min(len(known), show)], ", ")
	if len(known) > show {
		list += fmt.Sprintf(", and %d more", len(known)-show)
	}
	respond.Text(w, http.StatusNotFound, fmt.Sprintf("unknown %s check %q; the checks are: %s\n", ep.name, name, list))
}
