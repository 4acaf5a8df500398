package liveview

import (
	"context"
	"embed"
	"fmt"
	"net/http"
	"path"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"

	"github.com/actorkube/controllermanager/internal/respond"
)

// View serves a live view of a manager's supervision tree, under a
// prefix (DefaultPrefix unless WithPrefix says otherwise):
//
//	<prefix>/             the page: phase, leadership, the tree of children (a row each, a
//	                      group's children under it, folding), recent events
//	<prefix>/status.json  the same as JSON (Status), from the manager's Status
//	<prefix>/events       Server-Sent Events: "status" snapshots, "event" per supervision event,
//	                      "dropped" when this browser fell behind, "end" once the manager has stopped
//	<prefix>/control      POST, with WithControls only: restart, stop or start a child
//	                      or a group, named by its path
//
// <prefix> itself redirects to <prefix>/. Mount it with
// mux.Handle(DefaultPrefix+"/", h); behind http.StripPrefix, give the
// prefix that is left (WithPrefix("") when nothing is). The page and
// its script use relative addresses, so a reverse proxy may add a prefix of
// its own.
//
// The page is self-contained (its HTML, CSS and script are embedded; it
// loads nothing from elsewhere) and is served with a Content-Security-Policy
// that allows only those. It shows error messages and panic stacks: serve it
// on localhost or behind authentication, never on a public port. Every
// request must carry a Host the view is served under: loopback names and
// addresses, and those of WithAllowedHosts; another is answered 403,
// which defeats DNS rebinding.
//
// A browser never slows the supervisor: at most WithMaxStreams event
// streams are served at once (another is answered 503), and each is one Subscribe
// whose fn puts the event in a bounded buffer (WithStreamBuffer) or,
// when it is full, counts it as dropped; the request's goroutine writes to
// the browser. The handler also keeps one subscription of its own for the
// failure history of each child (WithWindow) and the newest events; it
// ends when the manager's event stream ends (the manager has stopped) or on
// Close.
type View struct {
	src     Source
	prefix  string
	cfg     config
	history *eventHistory
	stop    func()
	origins *http.CrossOriginProtection
	hosts   hostAllowlist
	streams chan struct{} // a slot per event stream being served

	renewMu   sync.Mutex
	renewCall *renewalCall // the lease check's call in flight, or nil
}

// renewalCall is one call of the lease check: requests that come while it
// runs wait for it, so that a check that hangs costs one goroutine, however
// often the view is read (as package health does for its checks).
type renewalCall struct {
	done chan struct{}
	err  error
}

// The handler's defaults (internal/defaults); see the options.
const (
	defaultRefresh      = defaults.DebugRefresh
	defaultStreamBuffer = defaults.DebugStreamBuffer
	defaultWindow       = defaults.DebugWindow
	defaultMaxStreams   = defaults.DebugMaxStreams
	// defaultTimeout is health.DefaultTimeout, which this package cannot
	// name (see healthzChecks).
	defaultTimeout = defaults.ProbeTimeout
)

// The handler's fixed timings.
const (
	// statusDebounce is how long the event stream waits after an event
	// before it sends a fresh snapshot, so that a burst costs one Status.
	statusDebounce = 250 * time.Millisecond
	// streamWriteTimeout bounds each write to a browser: one that stops
	// reading for that long is disconnected.
	streamWriteTimeout = 10 * time.Second
	// controlTimeout bounds a control request: a restart waits for the
	// child's Shutdown and its start call.
	controlTimeout = 30 * time.Second
)

//go:embed page/index.html page/debug.css page/debug.js
var pageAssets embed.FS

// Handler returns the live view of src's supervision tree; see
// View for what it serves. It subscribes to src at once, to record
// failures from now on.
//
// Handler panics when src is nil (a nil *ControllerManager too), the
// prefix is invalid (WithPrefix says what is valid), a name of
// WithAllowedHosts is, or a duration or count option is negative:
// programming errors, found at startup, as with health.NewHandler.
func Handler(src Source, opts ...Option) *View {
	switch {
	case src == nil:
		panic("liveview: Handler: nil Source")
	case nilPointer(src):
		panic(fmt.Sprintf("liveview: Handler: nil Source (%T)", src))
	}
	c := config{prefix: DefaultPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if err := c.negatives(); err != nil {
		panic("liveview: Handler: " + err.Error())
	}
	c.prefix = strings.TrimSuffix(c.prefix, "/")
	if c.prefix != "" && (!strings.HasPrefix(c.prefix, "/") || strings.ContainsAny(c.prefix, "?#") || path.Clean(c.prefix) != c.prefix) {
		panic(fmt.Sprintf("liveview: Handler: WithPrefix(%q): the prefix must be empty or a clean path that starts with \"/\"", c.prefix))
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if c.refresh <= 0 {
		c.refresh = defaultRefresh
	}
	if c.streamBuffer <= 0 {
		c.streamBuffer = defaultStreamBuffer
	}
	if c.window <= 0 {
		c.window = defaultWindow
	}
	if c.maxStreams <= 0 {
		c.maxStreams = defaultMaxStreams
	}
	hosts, err := newHostAllowlist(c.hosts)
	if err != nil {
		panic("liveview: Handler: " + err.Error())
	}
	h := &View{src: src, prefix: c.prefix, cfg: c, history: newEventHistory(c.window, time.Now()),
		origins: http.NewCrossOriginProtection(), hosts: hosts, streams: make(chan struct{}, c.maxStreams)}
	h.stop = src.Subscribe(h.history.record)
	return h
}

// nilPointer reports whether v is a nil pointer in a non-nil interface: a
// manager never assigned, whose methods would dereference nil.
func nilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Close ends the handler's own subscription to the event stream (the
// streams of connected browsers end with their requests). The handler goes
// on serving, without recording failures from then on. Close may be called
// more than once; it need not be called when the manager stops, which ends
// the subscription too.
func (h *View) Close() {
	h.stop()
}

// ServeHTTP routes the request under the handler's prefix, once its Host
// has passed the allowlist (WithAllowedHosts): another Host is
// answered 403, whatever the path.
func (h *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.checkHost(w, r) {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		http.NotFound(w, r)
		return
	}
	switch rest {
	case "":
		// Relative, so that it holds behind a proxy's prefix too
		// (http.Redirect would make it absolute).
		w.Header().Set("Location", path.Base(h.prefix)+"/")
		w.WriteHeader(http.StatusMovedPermanently)
	case "/", "/index.html":
		h.serveAsset(w, r, "page/index.html", "text/html; charset=utf-8")
	case "/debug.css":
		h.serveAsset(w, r, "page/debug.css", "text/css; charset=utf-8")
	case "/debug.js":
		h.serveAsset(w, r, "page/debug.js", "text/javascript; charset=utf-8")
	case "/status.json":
		h.serveStatus(w, r)
	case "/events":
		h.serveEvents(w, r)
	case "/control":
		h.serveControl(w, r)
	default:
		http.NotFound(w, r)
	}
}

// pageCSP allows the page its own script, style and event stream, and
// nothing else: no inline script, no framing (the buttons cannot be
// clickjacked), no form posted elsewhere.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (h *View) serveAsset(w http.ResponseWriter, r *http.Request, name, contentType string) {
	if !allowGet(w, r) {
		return
	}
	body, err := pageAssets.ReadFile(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", pageCSP)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

func allowGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	respond.Text(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: use GET\n", r.Method, r.URL.Path))
	return false
}

// serveStatus answers the Status, or 503 when the manager does not
// answer within the timeout.
func (h *View) serveStatus(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	st, err := h.status(r)
	if err != nil {
		respond.JSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	respond.JSON(w, http.StatusOK, st)
}

// status asks the manager for its Status and joins what the handler has
// recorded.
func (h *View) status(r *http.Request) (Status, error) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	st, err := h.src.Status(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("Status: %w", err)
	}
	now := time.Now()
	rec := h.history.snapshot(now)
	out := Status{
		Time:  now,
		Phase: string(st.Phase),
		Err:   newError(st.Err),
		Leadership: Leadership{
			Enabled:  st.Identity != "",
			Leader:   st.Leader,
			Identity: st.Identity,
			Holder:   st.LeaderIdentity,
			Renewal:  h.renewal(r),
		},
		Children:      make([]Child, len(st.Children)),
		Events:        rec.events,
		HistorySince:  rec.since,
		WindowSeconds: h.cfg.window.Seconds(),
		Controls:      Controls{Enabled: h.cfg.controls, Token: h.cfg.controls && h.cfg.token != ""},
	}
	for _, sh := range st.Shards {
		out.Leadership.Shards = append(out.Leadership.Shards, Shard{Index: sh.Index, Lease: sh.Lease, Holder: sh.Holder, Held: sh.Held, Children: sh.Children})
	}
	if st.Leader && !rec.leaderSince.IsZero() {
		out.Leadership.LeaderSince = &rec.leaderSince
	}
	for i, c := range st.Children {
		out.Children[i] = newChild(c, rec.failures)
	}
	return out, nil
}

// leaseCheckName is the name of a manager's lease watchdog check
// (lease.Watchdog.Name).
const leaseCheckName = "leaderElection"

// renewal runs the source's lease watchdog check, if it has one. The
// watchdog reads the elector's last renewal and answers at once; a check of
// that name that does not is given the handler's timeout and reported as
// silent.
func (h *View) renewal(r *http.Request) string {
	checks, ok := healthzChecks(h.src)
	if !ok {
		return ""
	}
	for _, c := range checks {
		if c == nil || c.Name() != leaseCheckName {
			continue
		}
		call := h.renewalOf(c, r)
		timer := time.NewTimer(h.cfg.timeout)
		defer timer.Stop()
		select {
		case <-call.done:
			if call.err != nil {
				return call.err.Error()
			}
			return "ok"
		case <-r.Context().Done():
			return ""
		case <-timer.C:
			return fmt.Sprintf("no answer within %s", h.cfg.timeout)
		}
	}
	return ""
}

// renewalOf is the lease check's call in flight, begun now if there is
// none. The call's context ends at the handler's timeout: a check that
// honours it returns then.
func (h *View) renewalOf(c checker, r *http.Request) *renewalCall {
	h.renewMu.Lock()
	defer h.renewMu.Unlock()
	if call := h.renewCall; call != nil {
		select {
		case <-call.done:
		default:
			return call
		}
	}
	call := &renewalCall{done: make(chan struct{})}
	h.renewCall = call
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.timeout)
	req := r.Clone(ctx)
	go func() {
		defer cancel()
		defer close(call.done)
		defer func() {
			if p := recover(); p != nil {
				call.err = fmt.Errorf("check panicked: %v", p)
			}
		}()
		call.err = c.Check(req)
	}()
	return call
}
