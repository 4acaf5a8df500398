// Package liveview serves a manager's supervision tree live in a browser:
// Handler returns a View with the page, its status.json, a Server-Sent
// Events stream of supervision events and, with WithControls, buttons that
// restart, stop and start children, for a loopback listener or one behind
// authentication.
//
//	view := http.NewServeMux()
//	view.Handle(liveview.DefaultPrefix+"/", liveview.Handler(mgr))
//
// The probes (/healthz, /livez, /readyz), /metrics and /debug/pprof/ are
// package health's.
package liveview
