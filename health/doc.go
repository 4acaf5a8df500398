// Package health serves a manager's probes over HTTP: /healthz, /livez and
// /readyz, in k8s.io/apiserver's healthz format, answered from the
// supervision tree within a deadline, every time; and, when asked, its
// Prometheus metrics and pprof profiles.
//
// # Endpoints
//
// NewHandler returns an http.Handler for these paths (mount it at the root of
// a mux, or under a prefix with http.StripPrefix):
//
//	/healthz          200 "ok", or 500 and the listing: "[+]name ok", "[-]name failed: reason withheld"
//	/healthz?verbose  the listing, passing or not, with each failure's reason
//	/healthz/<name>   one check: 200 "ok", or 500 with the reason; 404 if there is none by that name
//	/livez            the same for liveness (500 on failure); /livez?verbose, /livez/<name>
//	/readyz           the same for readiness (503 on failure); /readyz?verbose, /readyz/<name>
//	/metrics          with WithMetrics only; GET and HEAD (other methods get 405, as on the probes)
//	/debug/pprof/     with WithPprof only; GET and HEAD, and POST on /debug/pprof/symbol (go tool pprof's); other methods 405
//
// ?exclude=<name> (repeatable) does not run a check and lists it as
// "[+]name excluded: ok"; the name matches exactly, spaces included, as
// the apiserver's does (a controller named "jobs " is excluded by
// ?exclude=controller/jobs%20, not by ?exclude=controller/jobs);
// exclusions that match no check are named in a
// "warn: some health checks cannot be excluded: no matches for …" line. A
// request with Accept: application/json gets the JSON Report instead of the
// text. The listing ends with "<endpoint> check passed" or "<endpoint> check
// failed", as the apiserver's does.
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
// /livez runs "ping" (always passes), "phase", the Source's checks
// (CheckProvider) and the host's (WithLivezCheck): what a restart of the
// process would cure, never the controllers, which the supervisor restarts
// itself.
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
//
// # The live view
//
// The live view of the supervision tree (the page, status.json, the event
// stream and the controls) is package liveview's: liveview.Handler and its
// options. The Debug* names here (NewDebugHandler, WithDebugControls, …) are
// the second release's names for it, kept as deprecated aliases.
package health
