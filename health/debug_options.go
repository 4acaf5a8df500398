package health

import (
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// DefaultDebugPrefix is where NewDebugHandler serves unless WithDebugPrefix
// says otherwise.
const DefaultDebugPrefix = defaults.DebugPrefix

// DebugOption configures NewDebugHandler.
type DebugOption func(*debugConfig)

type debugConfig struct {
	prefix       string
	controls     bool
	token        string
	timeout      time.Duration
	refresh      time.Duration
	streamBuffer int
	window       time.Duration
	hosts        []string
	maxStreams   int
}

// WithDebugPrefix sets the path the handler serves under: the page at
// prefix+"/", the JSON at prefix+"/status.json", and so on. It must be
// empty (serve at the root, for a handler mounted with http.StripPrefix) or
// start with "/"; a trailing "/" is dropped. Default: DefaultDebugPrefix.
func WithDebugPrefix(prefix string) DebugOption {
	return func(c *debugConfig) { c.prefix = prefix }
}

// WithDebugControls turns on the page's Restart, Stop and Start buttons and
// the POST endpoint behind them (prefix+"/control"), which send
// supervisor.RestartChild, StopChild and StartChild to the manager. Off by
// default: they change the running system, and whoever can reach the
// handler can press them.
//
// Every control request must be a POST carrying the X-Supervision-Token
// header, with a Host the view is served under (WithDebugAllowedHosts), and
// is refused when a browser marks it cross-origin (the checks of
// http.CrossOriginProtection: Sec-Fetch-Site, then Origin against Host).
// With a non-empty token the header must also equal it (compared in
// constant time); the page asks the operator for it and keeps it for the
// browser tab only. Make one with `openssl rand -hex 32`.
//
// An empty token is accepted only from a loopback peer (the request's
// RemoteAddr is 127.0.0.0/8 or ::1), that is, when the handler is served
// on a loopback listener (or behind a proxy on the same host, which then
// decides who may reach it); a control request from any other address is
// refused 403, saying a token is needed.
func WithDebugControls(token string) DebugOption {
	return func(c *debugConfig) { c.controls, c.token = true, token }
}

// WithDebugAllowedHosts adds names (or addresses) the view is served under
// to the Host allowlist, which every request is checked against: the page,
// status.json, the event stream and the controls. A request with another
// Host is answered 403, so that a page that rebinds its own name to the
// view's address (DNS rebinding) cannot read or steer it. The loopback names
// and addresses are always allowed: localhost, 127.0.0.0/8 and ::1, with or
// without a port. Give a name with or without a port (any port matches), as
// the browser sends it: the name of a reverse proxy in front of the view, or
// the pod's address when it is reached by it. NewDebugHandler panics on an
// empty or malformed name. Default: loopback only.
func WithDebugAllowedHosts(hosts ...string) DebugOption {
	return func(c *debugConfig) { c.hosts = append(c.hosts, hosts...) }
}

// WithDebugMaxStreams bounds the event streams served at once (each is a
// browser tab, costing a subscription and a goroutine or three for as long
// as it is open); a stream past it is answered 503 with Retry-After. Default:
// 64. Zero or negative keeps the default.
func WithDebugMaxStreams(n int) DebugOption {
	return func(c *debugConfig) { c.maxStreams = n }
}

// WithDebugTimeout bounds each Status call the handler makes (for
// status.json and the snapshots of the event stream). Default:
// DefaultTimeout. Zero or negative keeps the default.
func WithDebugTimeout(d time.Duration) DebugOption {
	return func(c *debugConfig) { c.timeout = d }
}

// WithDebugRefresh sets how often the event stream also pushes a fresh
// Status snapshot when nothing happens, so that health messages, which
// change without an event, stay current. Default: 5s. Zero or negative
// keeps the default.
func WithDebugRefresh(d time.Duration) DebugOption {
	return func(c *debugConfig) { c.refresh = d }
}

// WithDebugStreamBuffer sets how many events one event stream holds for a
// browser that reads slower than events come. Past that, events are
// dropped, the browser is told how many, and it gets a fresh snapshot.
// Default: 256. Zero or negative keeps the default.
func WithDebugStreamBuffer(n int) DebugOption {
	return func(c *debugConfig) { c.streamBuffer = n }
}

// WithDebugWindow sets how far back the failure history of each child goes
// (the page's bar of failures). Default: 10 minutes. Zero or negative keeps
// the default.
func WithDebugWindow(d time.Duration) DebugOption {
	return func(c *debugConfig) { c.window = d }
}
