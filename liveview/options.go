package liveview

import (
	"errors"
	"fmt"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// DefaultPrefix is where Handler serves unless WithPrefix
// says otherwise.
const DefaultPrefix = defaults.DebugPrefix

// Option configures Handler.
type Option func(*config)

type config struct {
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

// WithPrefix sets the path the handler serves under: the page at
// prefix+"/", the JSON at prefix+"/status.json", and so on. It must be
// empty (serve at the root, for a handler mounted with http.StripPrefix) or
// start with "/"; a trailing "/" is dropped. Default: DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithControls turns on the page's Restart, Stop and Start buttons and
// the POST endpoint behind them (prefix+"/control"), which send
// supervisor.RestartChild, StopChild and StartChild to the manager. Off by
// default: they change the running system, and whoever can reach the
// handler can press them.
//
// Every control request must be a POST carrying the X-Supervision-Token
// header, with a Host the view is served under (WithAllowedHosts), and
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
func WithControls(token string) Option {
	return func(c *config) { c.controls, c.token = true, token }
}

// WithAllowedHosts adds names (or addresses) the view is served under
// to the Host allowlist, which every request is checked against: the page,
// status.json, the event stream and the controls. A request with another
// Host is answered 403, so that a page that rebinds its own name to the
// view's address (DNS rebinding) cannot read or steer it. The loopback names
// and addresses are always allowed: localhost, 127.0.0.0/8 and ::1, with or
// without a port. Give a name with or without a port (any port matches), as
// the browser sends it: the name of a reverse proxy in front of the view, or
// the pod's address when it is reached by it. Handler panics on an
// empty or malformed name. Default: loopback only.
func WithAllowedHosts(hosts ...string) Option {
	return func(c *config) { c.hosts = append(c.hosts, hosts...) }
}

// WithMaxStreams bounds the event streams served at once (each is a
// browser tab, costing a subscription and a goroutine or three for as long
// as it is open); a stream past it is answered 503 with Retry-After. Default:
// 64. Zero keeps the default; Handler panics on a negative n.
func WithMaxStreams(n int) Option {
	return func(c *config) { c.maxStreams = n }
}

// WithTimeout bounds each Status call the handler makes (for
// status.json and the snapshots of the event stream). Default:
// health.DefaultTimeout. Zero keeps the default; Handler panics on a
// negative d.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithRefresh sets how often the event stream also pushes a fresh
// Status snapshot when nothing happens, so that health messages, which
// change without an event, stay current. Default: 5s. Zero keeps the
// default; Handler panics on a negative d.
func WithRefresh(d time.Duration) Option {
	return func(c *config) { c.refresh = d }
}

// WithStreamBuffer sets how many events one event stream holds for a
// browser that reads slower than events come. Past that, events are
// dropped, the browser is told how many, and it gets a fresh snapshot.
// Default: 256. Zero keeps the default; Handler panics on a negative n.
func WithStreamBuffer(n int) Option {
	return func(c *config) { c.streamBuffer = n }
}

// WithWindow sets how far back the failure history of each child goes
// (the page's bar of failures). Default: 10 minutes. Zero keeps the
// default; Handler panics on a negative d.
func WithWindow(d time.Duration) Option {
	return func(c *config) { c.window = d }
}

// negatives names every duration and count option given a negative value,
// all at once; zero is each one's default.
func (c config) negatives() error {
	var errs []error
	negative := func(option string, v any, isNegative bool) {
		if isNegative {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %v", option, v))
		}
	}
	negative("WithTimeout", c.timeout, c.timeout < 0)
	negative("WithRefresh", c.refresh, c.refresh < 0)
	negative("WithStreamBuffer", c.streamBuffer, c.streamBuffer < 0)
	negative("WithWindow", c.window, c.window < 0)
	negative("WithMaxStreams", c.maxStreams, c.maxStreams < 0)
	return errors.Join(errs...)
}
