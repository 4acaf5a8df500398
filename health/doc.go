// Package health serves a manager's probes over HTTP: /healthz and /readyz,
// the Kubernetes way, answered from the supervision tree within a deadline,
// every time; and, when asked, its Prometheus metrics and pprof profiles.
//
// # Endpoints
//
// NewHandler returns an http.Handler for these paths (mount it at the root of
// a mux, or under a prefix with http.StripPrefix):
//
//	/healthz          200 or 500: the JSON Report {"healthy":…,"status":[…],"checks":[…]}
//	/healthz?verbose  the same checks as text: "[+]name ok", "[-]name failed: reason"
//	/healthz/<name>   one check: 200 "ok", or 500 with the reason; 404 if there is none by that name
//	/readyz           200 "ok", or 503 with the failing checks and their reasons
//	/readyz?verbose   the text listing
//	/readyz/<name>    one check: 200 "ok", or 503 with the reason; 404 if unknown
//	/metrics          with WithMetrics only
//	/debug/pprof/     with WithPprof only
//
// ?exclude=<name> (repeatable) leaves a check out of /healthz and /readyz; an
// excluded name that matches no check is reported in the verbose listing.
//
// # Checks
//
// /healthz runs, in this order:
//
//   - "phase": fails once the manager has stopped (Stopper) or its supervisor
//     reports Stopped or Failed, or does not answer (StatusSource), with the
//     reason: a requested shutdown, an escalation, a lost lease;
//   - "controller/<name>": one check per entry of the Source's GetHealth, in
//     the order GetHealth reports them ("controllers" names them all: it can
//     be excluded or asked for as one check);
//   - the checks of the Source itself (CheckProvider: the lease watchdog of
//     a manager with election on);
//   - the host's checks (WithHealthzCheck).
//
// /readyz runs "manager" (the Source's GetReadiness), then the host's
// checks (WithReadyzCheck).
//
// # Deadlines
//
// Every check of a request runs concurrently, and the handler answers within
// its timeout plus a margin (see WithTimeout) whatever the checks do: a check
// still running then fails with "no answer within …". The timeout defaults to
// the Source's HealthTimeout, which bounds a manager's GetHealth already; the
// handler does not trust the Source to keep that promise. A call into the
// Source (GetHealth, GetReadiness, Status) is shared by the requests that
// arrive while it runs, and a host check that has overrun its deadline is not
// called again until it returns: a hung check costs one goroutine, not one
// per probe, and a burst of probes costs one sweep of the tree.
package health
