package health

import (
	"context"
	"embed"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/supervisor"
)

// DebugSource is what the supervision view needs of a manager: its Status,
// its event stream and its lifecycle messages. Both managers of package
// controllermanager implement it (their Status, Subscribe and Request).
//
// Subscribe must call fn on a goroutine of its own and never stall the
// publisher on it (a manager's does: each subscriber has its own queue);
// the handler's fn returns at once in any case.
type DebugSource interface {
	Status(ctx context.Context) (supervisor.Status, error)
	Subscribe(fn func(supervisor.Event)) (cancel func())
	Request(ctx context.Context, msg any) (any, error)
}

// DebugHandler serves a live view of a manager's supervision tree, under a
// prefix (DefaultDebugPrefix unless WithDebugPrefix says otherwise):
//
//	<prefix>/             the page: phase, leadership, one row per child, recent events
//	<prefix>/status.json  the same as JSON (DebugStatus), from the manager's Status
//	<prefix>/events       Server-Sent Events: "status" snapshots, "event" per supervision event,
//	                      "dropped" when this browser fell behind, "end" once the manager has stopped
//	<prefix>/control      POST, with WithDebugControls only: restart, stop or start a child
//
// <prefix> itself redirects to <prefix>/. Mount it with
// mux.Handle(DefaultDebugPrefix+"/", h); behind http.StripPrefix, give the
// prefix that is left (WithDebugPrefix("") when nothing is). The page and
// its script use relative addresses, so a reverse proxy may add a prefix of
// its own.
//
// The page is self-contained (its HTML, CSS and script are embedded; it
// loads nothing from elsewhere) and is served with a Content-Security-Policy
// that allows only those. It shows error messages and panic stacks: serve it
// on localhost or behind authentication, never on a public port. Every
// request must carry a Host the view is served under: loopback names and
// addresses, and those of WithDebugAllowedHosts; another is answered 403,
// which defeats DNS rebinding.
//
// A browser never slows the supervisor: at most WithDebugMaxStreams event
// streams are served at once (another is answered 503), and each is one Subscribe
// whose fn puts the event in a bounded buffer (WithDebugStreamBuffer) or,
// when it is full, counts it as dropped; the request's goroutine writes to
// the browser. The handler also keeps one subscription of its own for the
// failure history of each child (WithDebugWindow) and the newest events; it
// ends when the manager's event stream ends (the manager has stopped) or on
// Close.
type DebugHandler struct {
	src     DebugSource
	prefix  string
	cfg     debugConfig
	history *debugHistory
	stop    func()
	origins *http.CrossOriginProtection
	hosts   debugHosts
	streams chan struct{} // a slot per event stream being served
}

// The handler's defaults (internal/defaults); see the options.
const (
	defaultDebugRefresh      = defaults.DebugRefresh
	defaultDebugStreamBuffer = defaults.DebugStreamBuffer
	defaultDebugWindow       = defaults.DebugWindow
	defaultDebugMaxStreams   = defaults.DebugMaxStreams
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

//go:embed debug/index.html debug/debug.css debug/debug.js
var debugAssets embed.FS

// NewDebugHandler returns the live view of src's supervision tree; see
// DebugHandler for what it serves. It subscribes to src at once, to record
// failures from now on.
//
// NewDebugHandler panics when src is nil, the prefix is invalid
// (WithDebugPrefix says what is valid) or a name of WithDebugAllowedHosts
// is: programming errors, found at startup, as with NewHandler.
func NewDebugHandler(src DebugSource, opts ...DebugOption) *DebugHandler {
	if src == nil {
		panic("health: NewDebugHandler: nil DebugSource")
	}
	c := debugConfig{prefix: DefaultDebugPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	c.prefix = strings.TrimSuffix(c.prefix, "/")
	if c.prefix != "" && (!strings.HasPrefix(c.prefix, "/") || strings.ContainsAny(c.prefix, "?#") || path.Clean(c.prefix) != c.prefix) {
		panic(fmt.Sprintf("health: NewDebugHandler: WithDebugPrefix(%q): the prefix must be empty or a clean path that starts with \"/\"", c.prefix))
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.refresh <= 0 {
		c.refresh = defaultDebugRefresh
	}
	if c.streamBuffer <= 0 {
		c.streamBuffer = defaultDebugStreamBuffer
	}
	if c.window <= 0 {
		c.window = defaultDebugWindow
	}
	if c.maxStreams <= 0 {
		c.maxStreams = defaultDebugMaxStreams
	}
	hosts, err := newDebugHosts(c.hosts)
	if err != nil {
		panic("health: NewDebugHandler: " + err.Error())
	}
	h := &DebugHandler{src: src, prefix: c.prefix, cfg: c, history: newDebugHistory(c.window, time.Now()),
		origins: http.NewCrossOriginProtection(), hosts: hosts, streams: make(chan struct{}, c.maxStreams)}
	h.stop = src.Subscribe(h.history.record)
	return h
}

// Close ends the handler's own subscription to the event stream (the
// streams of connected browsers end with their requests). The handler goes
// on serving, without recording failures from then on. Close may be called
// more than once; it need not be called when the manager stops, which ends
// the subscription too.
func (h *DebugHandler) Close() {
	h.stop()
}

// ServeHTTP routes the request under the handler's prefix, once its Host
// has passed the allowlist (WithDebugAllowedHosts): another Host is
// answered 403, whatever the path.
func (h *DebugHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		h.serveAsset(w, r, "debug/index.html", "text/html; charset=utf-8")
	case "/debug.css":
		h.serveAsset(w, r, "debug/debug.css", "text/css; charset=utf-8")
	case "/debug.js":
		h.serveAsset(w, r, "debug/debug.js", "text/javascript; charset=utf-8")
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

// debugCSP allows the page its own script, style and event stream, and
// nothing else: no inline script, no framing (the buttons cannot be
// clickjacked), no form posted elsewhere.
const debugCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (h *DebugHandler) serveAsset(w http.ResponseWriter, r *http.Request, name, contentType string) {
	if !allowGet(w, r) {
		return
	}
	body, err := debugAssets.ReadFile(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", debugCSP)
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
	writeText(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: use GET\n", r.Method, r.URL.Path))
	return false
}

// serveStatus answers the DebugStatus, or 503 when the manager does not
// answer within the timeout.
func (h *DebugHandler) serveStatus(w http.ResponseWriter, r *http.Request) {
	if !allowGet(w, r) {
		return
	}
	st, err := h.status(r)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// status asks the manager for its Status and joins what the handler has
// recorded.
func (h *DebugHandler) status(r *http.Request) (DebugStatus, error) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	st, err := h.src.Status(ctx)
	if err != nil {
		return DebugStatus{}, fmt.Errorf("Status: %w", err)
	}
	now := time.Now()
	rec := h.history.snapshot(now)
	out := DebugStatus{
		Time:  now,
		Phase: string(st.Phase),
		Err:   newDebugError(st.Err),
		Leadership: DebugLeadership{
			Enabled:  st.Identity != "",
			Leader:   st.Leader,
			Identity: st.Identity,
			Holder:   st.LeaderIdentity,
			Renewal:  h.renewal(r),
		},
		Children:      make([]DebugChild, len(st.Children)),
		Events:        rec.events,
		HistorySince:  rec.since,
		WindowSeconds: h.cfg.window.Seconds(),
		Controls:      DebugControls{Enabled: h.cfg.controls, Token: h.cfg.controls && h.cfg.token != ""},
	}
	for _, sh := range st.Shards {
		out.Leadership.Shards = append(out.Leadership.Shards, DebugShard{Index: sh.Index, Lease: sh.Lease, Holder: sh.Holder, Held: sh.Held, Children: sh.Children})
	}
	if st.Leader && !rec.leaderSince.IsZero() {
		out.Leadership.LeaderSince = &rec.leaderSince
	}
	for i, c := range st.Children {
		out.Children[i] = newDebugChild(c, rec.failures[c.Name])
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
func (h *DebugHandler) renewal(r *http.Request) string {
	cp, ok := h.src.(CheckProvider)
	if !ok {
		return ""
	}
	for _, c := range cp.HealthzChecks() {
		if c == nil || c.Name() != leaseCheckName {
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- fmt.Errorf("check panicked: %v", p)
				}
			}()
			done <- c.Check(r.WithContext(ctx))
		}()
		select {
		case err := <-done:
			if err != nil {
				return err.Error()
			}
			return "ok"
		case <-ctx.Done():
			return fmt.Sprintf("no answer within %s", h.cfg.timeout)
		}
	}
	return ""
}
