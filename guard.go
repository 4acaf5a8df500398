package controllermanager

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/lease"
)

// Fencing at the write. client-go's leader election does not fence: a
// leader that is paused (a GC pause, SIGSTOP, a starved node) wakes up still
// believing it leads, and its workers write before its elector notices. The
// lease guard closes that window where it opens, at the write: it answers,
// synchronously and without an API call, whether this replica can still
// prove it holds the lease. The proof is the send time of the last
// successful renewal on the monotonic clock: no other replica can acquire the
// lease before that plus the lease duration, less a margin (see lease.Term). docs/leader-election.md sets out what it
// closes and what it cannot.

// LeaseGuard returns the lease guard of the controller (or store) whose Run
// (Recover) received ctx: guard() is nil while this replica can prove it
// holds the lease the child runs under, else an error wrapping
// lease.ErrNotHeld (and lease.ErrLost once the lease was lost) with the
// figures: the last renewal's send time, the lease duration, now. Call it
// just before each write, or wrap the child's clients with GuardTransport.
//
// guard reads an atomic and the clock: no lock, no allocation when it
// passes, no API call; call it from any goroutine, as often as needed. It
// stays valid after Run returns, for the incarnation's lifetime, and fails
// for ever once the incarnation's Shutdown has returned, and once the
// election it started under has ended, even if this replica leads again
// later (the next incarnation has a guard of its own). During Shutdown it
// still passes while the lease is held.
//
// With election off there is no lease to prove: the deployment has declared
// this replica the only writer, so guard passes until the incarnation's
// Shutdown has returned (ok is true). A fenced client then works unchanged
// whether election is on or off, and still refuses an ended incarnation's
// writes.
//
// ok is false when ctx did not come from a manager's call of a controller's
// Run or a store's Recover (a webhook does not run under the lease); guard
// then always fails, so that a write guarded by mistake is refused rather
// than let through unchecked.
func LeaseGuard(ctx context.Context) (guard func() error, ok bool) {
	return actors.LeaseGuard(ctx)
}

// LeaseGuard is the lease guard of this replica's single lease, for code
// outside a child: nil while this replica can prove it holds the lease, else
// an error wrapping lease.ErrNotHeld with the figures. Unlike a child's
// guard, it follows the lease from election to election: it passes again
// once this replica has been elected again. Before the first election it
// fails. With election off it is nil until the manager has stopped, then an
// error wrapping lease.ErrNotHeld. As cheap as a child's guard.
func (m *ControllerManager) LeaseGuard() error {
	if m.election == nil {
		select {
		case <-m.Done():
			return &lease.NotHeldError{Reason: "the manager has stopped"}
		default:
			return nil
		}
	}
	return m.election.AnyShard()
}

// ShardLeaseGuard is the lease guard of one shard's Lease, for code outside
// a child that writes for that shard (a runnable, an HTTP handler, a worker
// of its own): nil while this replica can prove it holds Lease
// "<leaseName>-<shard>", else an error wrapping lease.ErrNotHeld (and
// lease.ErrLost once that hold was lost) with the figures. Like LeaseGuard
// it follows the Lease from hold to hold: it passes again once this replica
// holds the shard again. It fails before the shard is first acquired, and
// for every shard once the manager has stopped. No API call: a short lock
// and a clock read; safe from any goroutine.
//
// With one lease (Shards 0 or 1), shard 0 is that lease: ShardLeaseGuard(0)
// is LeaseGuard(), election off included. An index outside 0..Shards-1 is a
// mistake that no write may get past: the error names the index and the
// count, and wraps lease.ErrNotHeld too.
//
// Which guard to use:
//   - in a controller's Run or a store's Recover, and in what they start,
//     LeaseGuard(ctx): bound to that incarnation and to the lease it runs
//     under (its shard's, with sharding), it fails for ever once the
//     incarnation is over, so that a worker left behind is refused even if
//     the lease comes back;
//   - outside a child, for a write that belongs to one shard (a key k with
//     ShardOf(k, Shards) == shard), ShardLeaseGuard(shard);
//   - outside a child, for a write that belongs to the replica as a whole
//     (what stores do), LeaseGuard(): with shards it passes while this
//     replica holds any of them, so it does not fence one shard's writes.
func (m *ControllerManager) ShardLeaseGuard(shard int) error {
	count := 1
	if m.election != nil && m.election.Sharded() {
		count = m.election.shards
	}
	if shard < 0 || shard >= count {
		return fmt.Errorf("controllermanager: ShardLeaseGuard(%d): no such shard, this manager has %d (0 to %d): %w",
			shard, count, count-1, lease.ErrNotHeld)
	}
	if count == 1 {
		return m.LeaseGuard()
	}
	return m.election.Guard(shard)()
}

// GuardTransport returns a RoundTripper that sends a request that acts on
// the cluster through rt only when guard() returns nil at the moment of
// sending, and otherwise refuses it, unsent, with guard()'s error (wrapped:
// errors.Is(err, lease.ErrNotHeld) holds through client-go's typed and
// dynamic clients and its WebSocket executor). A request acts on the
// cluster when it is
//
//   - mutating: any method but GET, HEAD and OPTIONS, the reads. That is
//     POST, PUT, PATCH and DELETE, and every other method (WebDAV's MKCOL,
//     LOCK or MOVE, PURGE, TRACE, CONNECT, a method of the workload's own):
//     the API server forwards any method through the proxy subresources
//     (pods/NAME/proxy, services/NAME/proxy, nodes/NAME/proxy, the kubelet's
//     own API included) to the workload, which may act on it, while the API
//     server's own resources refuse a method they do not know;
//   - an upgrade to another protocol, whatever its method: a Connection
//     header naming upgrade, an Upgrade header, or the headers client-go's
//     executors send before the upgrade (Sec-WebSocket-Protocol,
//     X-Stream-Protocol-Version): WebSocket or SPDY;
//   - to a pod's exec, attach or portforward subresource
//     (/api/v1/namespaces/NS/pods/NAME/exec, under any path prefix of the
//     config's Host), whatever its method: the API server authorizes a GET
//     upgraded to a WebSocket there as create on pods/exec.
//
// The body of a mutating request checks the guard again at every read and
// at its end, so that a request whose headers went out just before the
// process was paused is aborted on waking rather than completed (the API
// server acts on a request only once its body has ended). Other reads (GET,
// HEAD, OPTIONS, watches) always pass, through a proxy subresource too: a
// read of a workload's /metrics or /healthz through pods/NAME/proxy is a
// read, authorized by the API server as get on pods/proxy, and a fenced
// replica may still need it; an endpoint that acts on a GET is the
// workload's to guard. A nil rt is http.DefaultTransport; a
// nil guard refuses every request that acts on the cluster.
//
// Fence a controller's whole clientset with rest.Config's Wrap, in its Run:
//
//	guard, _ := cm.LeaseGuard(ctx)
//	cfg := rest.CopyConfig(base)
//	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(guard, rt) })
//	client, err := kubernetes.NewForConfig(cfg)
//
// Every typed and dynamic client, and the informers built from that config,
// then go through it: informers only read, so they pass; the controller's
// writes (its own, and those of clients built from cfg, controller-runtime's
// included) are fenced. So are the sessions of client-go's remotecommand
// executors (NewSPDYExecutor, NewWebSocketExecutor, NewFallbackExecutor) and
// its port forwarder (portforward with transport/spdy's RoundTripperFor, or
// NewSPDYOverWebsocketDialer) built from cfg: they build transports of their
// own, but wrap them with cfg's WrapTransport, which Wrap sets. Use Wrap,
// not rest.Config's Transport field: those executors ignore Transport, and
// a guard set there does not fence them. Through the SPDY executor and the
// port forwarder, client-go formats the refusal into its own error with %v:
// the message still says "refused by the lease guard" and the guard's
// reason, but errors.Is no longer sees lease.ErrNotHeld.
//
// The guard is checked when a session opens: an exec, attach or
// port-forward session already open is not cut when the guard fails later
// (its stream no longer goes through the RoundTripper). End it yourself on
// a lost lease, by cancelling the context given to StreamWithContext or
// closing the port forwarder's stop channel.
//
// A write refused is not retried by client-go; treat it as a lost lease:
// stop the work, report it, or let Shutdown come.
func GuardTransport(guard func() error, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	if guard == nil {
		guard = func() error { return &lease.NotHeldError{Reason: "GuardTransport was given no guard"} }
	}
	return &guardedTransport{guard: guard, next: rt}
}

// guardedTransport is GuardTransport's RoundTripper.
type guardedTransport struct {
	guard func() error
	next  http.RoundTripper
}

var _ utilnet.RoundTripperWrapper = (*guardedTransport)(nil)

// RoundTrip refuses a request that acts on the cluster when the guard
// fails, closing its body as a RoundTripper must; anything else goes to the
// wrapped transport.
func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !actsOnCluster(req) {
		return t.next.RoundTrip(req)
	}
	if err := t.guard(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, t.refused(req, err)
	}
	if req.Body != nil && req.Body != http.NoBody {
		req = t.guardBody(req)
	}
	return t.next.RoundTrip(req)
}

// actsOnCluster reports whether req needs the guard (see GuardTransport):
// any method but the reads (an unknown one included: a proxy subresource
// forwards it to a workload), an upgrade, or a pod's exec, attach or
// portforward subresource.
func actsOnCluster(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions: // "" is GET
		return asksUpgrade(req.Header) || streamsToPod(req.URL.Path)
	}
	return true
}

// upgradeHeaders are the headers of a request that asks for another
// protocol: the standard ones, and those client-go's executors set above
// the transport that adds the standard ones (the WebSocket executor's
// Sec-WebSocket-Protocol; the SPDY dialer's X-Stream-Protocol-Version).
var upgradeHeaders = []string{"Upgrade", "Sec-Websocket-Key", "Sec-Websocket-Protocol", "Sec-Websocket-Version", "X-Stream-Protocol-Version"}

func asksUpgrade(h http.Header) bool {
	for _, name := range upgradeHeaders {
		if len(h.Values(name)) > 0 {
			return true
		}
	}
	for _, v := range h.Values("Connection") {
		for token := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(token), "upgrade") {
				return true
			}
		}
	}
	return false
}

// streamsToPod reports whether path is a pod's exec, attach or portforward
// subresource, .../api/v1/namespaces/NS/pods/NAME/SUB, after any prefix
// (a Host with a path, an API server behind a proxy).
func streamsToPod(path string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	n := len(segs)
	if n < 7 {
		return false
	}
	switch segs[n-1] {
	case "exec", "attach", "portforward":
	default:
		return false
	}
	return segs[n-7] == "api" && segs[n-6] == "v1" && segs[n-5] == "namespaces" && segs[n-3] == "pods"
}

func (t *guardedTransport) refused(req *http.Request, err error) error {
	return fmt.Errorf("controllermanager: %s %s refused by the lease guard: %w", req.Method, req.URL.Path, err)
}

// guardBody returns a copy of req whose body checks the guard again at every
// read, the last one (io.EOF) included. A transport sends the headers before
// it reads the body, and the API server acts on a request only once its body
// has ended: a process paused in between (SIGSTOP after the headers went out)
// would otherwise complete, on waking, a write it checked before the pause.
// With the check at the body's end, the transport aborts the request instead.
func (t *guardedTransport) guardBody(req *http.Request) *http.Request {
	r := req.Clone(req.Context())
	r.Body = &guardedBody{ReadCloser: req.Body, check: func() error {
		if err := t.guard(); err != nil {
			return t.refused(req, err)
		}
		return nil
	}}
	if getBody := req.GetBody; getBody != nil {
		r.GetBody = func() (io.ReadCloser, error) {
			body, err := getBody()
			if err != nil || body == http.NoBody {
				return body, err
			}
			return &guardedBody{ReadCloser: body, check: r.Body.(*guardedBody).check}, nil
		}
	}
	return r
}

// guardedBody is a request body that fails a read once the guard fails.
type guardedBody struct {
	io.ReadCloser
	check func() error
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if cerr := b.check(); cerr != nil {
		return 0, cerr
	}
	return n, err
}

// WrappedRoundTripper returns the transport it wraps, for client-go's
// transport utilities.
func (t *guardedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
