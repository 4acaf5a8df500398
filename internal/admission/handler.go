// Package admission is the HTTP handler behind a manager's Handler: it routes
// AdmissionReviews to the manager's webhook actors. Only the root package
// uses it; package webhook holds its Config and the HTTPS server.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/internal/childactor"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
	"github.com/actorkube/controllermanager/webhook"
)

// The bounds of ?timeout=, those of a webhook configuration's
// timeoutSeconds: shorter is not from an API server and is refused (it would
// only let a client fail calls at will), longer is capped.
const (
	minTimeout = time.Second
	maxTimeout = 30 * time.Second
)

// withDefaults fills c's zero fields with the defaults each states.
func withDefaults(c webhook.Config) webhook.Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = webhook.DefaultMaxBodyBytes
	}
	switch {
	case c.MaxInFlight == 0:
		c.MaxInFlight = webhook.DefaultMaxInFlight
	case c.MaxInFlight < 0:
		c.MaxInFlight = 0
	}
	switch {
	case c.MaxBodyReads == 0:
		c.MaxBodyReads = webhook.DefaultMaxBodyReads
	case c.MaxBodyReads < 0:
		c.MaxBodyReads = 0
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = webhook.DefaultTimeout
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = webhook.DefaultReadyTimeout
	}
	switch {
	case c.FailureThreshold == 0:
		c.FailureThreshold = webhook.DefaultFailureThreshold
	case c.FailureThreshold < 0:
		c.FailureThreshold = 0
	}
	return c
}

// Host is what a handler needs of the manager whose webhooks it serves. A
// manager's facade implements it over its supervisor; *supervisor.Observed
// has the first three methods.
type Host interface {
	// Phase is the manager's phase: requests are answered 503 before Start
	// and once the manager has ended.
	Phase() supervisor.Phase
	// Webhooks is the table of the webhooks the manager runs, as last
	// published by its supervisor; nil before it has published one.
	Webhooks() *supervise.WebhookTable
	// Terminated is closed once the manager's actors are gone: a request
	// waiting for one is then answered 503.
	Terminated() <-chan struct{}
	// Send delivers msg (an *actors.AdmissionCall) to the webhook actor pid.
	Send(pid *actor.PID, msg any)
}

// NewHandler returns an http.Handler that serves the webhooks of host:
// a POST to a webhook's Path() with an admission.k8s.io/v1 (or v1beta1)
// AdmissionReview runs the webhook's Handle, in a goroutine owned by the
// webhook's actor, and is answered with an AdmissionReview of the same
// apiVersion whose response.uid is the request's. Requests run
// concurrently; cfg bounds them. logger receives the routing failures (a
// Path that panics, hangs or is empty; two webhooks with one path); nil
// discards them. metrics, when not nil, counts and times the requests to
// each webhook's path (see NewMetrics).
//
// Bad input never reaches Handle: an unknown path is answered 404, another
// method 405, a Content-Type other than application/json 415, a body over
// cfg.MaxBodyBytes 413, one that arrives while cfg.MaxBodyReads bodies
// are being read 429 (before its body is read), a body that is not an
// AdmissionReview with a request and a uid (or of another apiVersion, or a
// ?timeout= that is not a duration of at least a second) 400 with the
// reason. A webhook not running (not
// started, restarting, stopped) or not Ready() is answered 503, one with
// cfg.MaxInFlight calls running 429. A Handle that returns an error, or
// panics, or has not answered shortly before the request's ?timeout= (10%
// of it, at most a second, before, so that the answer reaches the API
// server in time) is answered 200 with a review that denies the request,
// its status carrying the reason; the failure counts towards
// cfg.FailureThreshold. Every request is answered exactly once.
//
// The handler reads the webhooks host has (AddChild and RemoveChild
// included) at each request; Path() is asked once per webhook and must not
// change (one that has not returned within a second is waited for again,
// up to a second, by each request for a path no webhook serves, until it
// has). Of two webhooks with one path (the manager's Start and AddChild
// refuse them, but one added by Request, or whose Path() was late at the
// check, is not), the one added first serves it.
// The handler may be created before the manager starts; until then it
// answers 503. See docs/webhooks.md for the flow and every status.
func NewHandler(host Host, cfg webhook.Config, logger *slog.Logger, metrics *Metrics) http.Handler {
	cfg = withDefaults(cfg)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var reads chan struct{}
	if cfg.MaxBodyReads > 0 {
		reads = make(chan struct{}, cfg.MaxBodyReads)
	}
	return &admissionHandler{
		reads:   reads,
		cfg:     cfg,
		host:    host,
		logger:  logger,
		metrics: metrics,
		policy: childactor.AdmissionPolicy{
			MaxInFlight: cfg.MaxInFlight, ReadyTimeout: cfg.ReadyTimeout, FailureThreshold: cfg.FailureThreshold,
		},
	}
}

// admissionHandler is what NewHandler returns.
type admissionHandler struct {
	cfg     webhook.Config
	host    Host
	logger  *slog.Logger
	metrics *Metrics // nil: none
	policy  childactor.AdmissionPolicy
	reads   chan struct{} // a slot per body being read and decoded; nil: no bound

	routesMu sync.Mutex                 // serialises rebuilding routes
	routes   atomic.Pointer[pathRoutes] // built from host.Webhooks()
}

// pathRoutes maps paths to webhooks for one published WebhookTable.
type pathRoutes struct {
	table  *supervise.WebhookTable
	byPath map[string]pathRoute
	paths  map[*actor.PID]string // each webhook's Path(), asked once; "" when it could not be had
	// late holds the Path() calls that had not returned within pathTimeout:
	// a request that finds no webhook at its path waits for them again
	// (rebuildRoutes), rather than their webhooks going unserved until the
	// table changes.
	late map[*actor.PID]<-chan string
}

// pathRoute is the webhook served at a path, and the series its abandoned
// Handle calls count in (nil without metrics).
type pathRoute struct {
	supervise.WebhookRoute
	abandoned *abandonedSeries
}

// pathTimeout bounds a webhook's Path() call.
const pathTimeout = time.Second

// admissionError is a request answered with an HTTP error, not a review.
type admissionError struct {
	code   int
	reason string
}

func (h *admissionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := h.host.Phase(); {
	case p == supervisor.PhaseIdle:
		w.Header().Set("Retry-After", "1")
		writeAdmissionError(w, admissionError{http.StatusServiceUnavailable, "manager not started"})
		return
	case p.Ended():
		w.Header().Set("Retry-After", "1")
		writeAdmissionError(w, admissionError{http.StatusServiceUnavailable, "manager stopped"})
		return
	}
	route, ok := h.route(r.URL.Path)
	if !ok {
		writeAdmissionError(w, admissionError{http.StatusNotFound, fmt.Sprintf("no webhook is served at %q", r.URL.Path)})
		return
	}
	body := w // the request's own writer, for MaxBytesReader
	if h.metrics != nil {
		rec := h.metrics.begin(r.URL.Path, w) // a path served: the label's values are bounded
		defer rec.end()
		w = rec
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeAdmissionError(w, admissionError{http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: admission reviews are POSTed", r.Method)})
		return
	}
	if aerr := checkContentType(r); aerr != nil {
		writeAdmissionError(w, *aerr)
		return
	}
	timeout, err := requestTimeout(r, h.cfg.DefaultTimeout)
	if err != nil {
		writeAdmissionError(w, admissionError{http.StatusBadRequest, err.Error()})
		return
	}
	var review admissionv1.AdmissionReview
	if aerr := h.readReview(body, r, &review); aerr != nil {
		if aerr.code == http.StatusTooManyRequests {
			// Refused before its body was read: closing the connection
			// spares reading (up to 256 KiB of) a body nobody wants, which
			// net/http would otherwise do to reuse it.
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
		}
		writeAdmissionError(w, *aerr)
		return
	}
	h.admit(w, r, route, &review, timeout)
}

// readReview reads and decodes the request's body, holding one of the
// MaxBodyReads slots while it does; the raw body is let go before the
// review goes to its webhook (the decoded review holds copies of what it
// needs).
func (h *admissionHandler) readReview(w http.ResponseWriter, r *http.Request, review *admissionv1.AdmissionReview) *admissionError {
	if h.reads != nil {
		select {
		case h.reads <- struct{}{}:
			defer func() { <-h.reads }()
		default:
			return &admissionError{http.StatusTooManyRequests, fmt.Sprintf(
				"too many request bodies being read at once (MaxBodyReads %d): retry later", cap(h.reads))}
		}
	}
	buf := bodyBuffers.Get().(*[]byte)
	defer putBodyBuffer(buf)
	if aerr := readBody(buf, w, r, h.cfg.MaxBodyBytes); aerr != nil {
		return aerr
	}
	return decodeReview(*buf, review)
}

// admit sends the request to the webhook's actor and answers with its
// result, or with a denial once the request's deadline has passed.
func (h *admissionHandler) admit(w http.ResponseWriter, r *http.Request, route pathRoute, review *admissionv1.AdmissionReview, timeout time.Duration) {
	answerBy := timeout - min(timeout/10, time.Second)
	ctx, cancel := context.WithTimeout(r.Context(), answerBy)
	defer cancel()
	reply := make(chan childactor.AdmissionResult, 1)
	call := &childactor.AdmissionCall{Ctx: ctx, Request: review.Request, Policy: h.policy, Reply: reply}
	if route.abandoned != nil { // never a typed nil in the interface
		call.Abandonments = route.abandoned
	}
	h.host.Send(route.PID, call)

	var res childactor.AdmissionResult
	gone := route.Gone
	terminated := h.host.Terminated()
wait:
	for {
		select {
		case res = <-reply:
			break wait
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return // the client has gone: there is no one to answer
			}
			writeReview(w, review, denial(review.Request, http.StatusGatewayTimeout, metav1.StatusReasonTimeout,
				fmt.Sprintf("webhook %q did not answer within %s", route.Name, answerBy)))
			return
		case <-terminated:
			// A call its actor has not taken never will be: 503 at once.
			// One it took runs (its goroutine outlives the actors, and a
			// ShutdownAndWait waits for it), and is answered as it says,
			// or at the request's deadline.
			if !call.Abandon() {
				terminated = nil
				continue
			}
			w.Header().Set("Retry-After", "1")
			writeAdmissionError(w, admissionError{http.StatusServiceUnavailable, "manager stopped"})
			return
		case <-gone:
			// Removed after the request was routed. A call its actor has
			// not taken never will be (a dead letter, or refused below):
			// 503 at once. One it took runs, and is answered as it says.
			if !call.Abandon() {
				gone = nil
				continue
			}
			w.Header().Set("Retry-After", "1")
			writeAdmissionError(w, admissionError{http.StatusServiceUnavailable, fmt.Sprintf("webhook %q was removed", route.Name)})
			return
		}
	}
	switch {
	case errors.Is(res.Refused, actors.ErrTooManyRequests):
		w.Header().Set("Retry-After", "1")
		writeAdmissionError(w, admissionError{http.StatusTooManyRequests, res.Refused.Error()})
	case res.Refused != nil:
		w.Header().Set("Retry-After", "1")
		writeAdmissionError(w, admissionError{http.StatusServiceUnavailable, res.Refused.Error()})
	case res.Err != nil:
		writeReview(w, review, denial(review.Request, http.StatusInternalServerError, metav1.StatusReasonInternalError, res.Err.Error()))
	default:
		resp := *res.Response // the webhook's value may be shared between requests: never write to it
		resp.UID = review.Request.UID
		writeReview(w, review, &resp)
	}
}

// route finds the webhook served at path.
func (h *admissionHandler) route(path string) (pathRoute, bool) {
	table := h.host.Webhooks()
	routes := h.routes.Load()
	if routes != nil && routes.table != table {
		// The table changed (a webhook added or removed): a path served
		// already by a webhook still in it is served as before, without
		// waiting for the new webhooks' Path calls (up to pathTimeout).
		if rt, ok := routes.byPath[path]; ok && inTable(table, rt.PID) {
			return rt, true
		}
	}
	if routes == nil || routes.table != table || len(routes.late) > 0 && !routes.serves(path) {
		// A new table, or no webhook at path while a Path() is late: it
		// may be that webhook's, and is waited for again, as long as a
		// new webhook's is.
		routes = h.rebuildRoutes(table, routes)
	}
	rt, ok := routes.byPath[path]
	return rt, ok
}

// inTable reports whether the webhook of pid is in table.
func inTable(table *supervise.WebhookTable, pid *actor.PID) bool {
	if table == nil {
		return false
	}
	for _, rt := range table.Routes {
		if rt.PID == pid {
			return true
		}
	}
	return false
}

// rebuildRoutes maps paths to the webhooks of table, asking each webhook not
// seen before for its Path(), and waiting again for the Path() calls that
// were late (the same call: a Path() that hangs costs one goroutine, not
// one per request). seen is the routes the caller found: when another
// request has rebuilt them since, for the same table, the caller takes
// those rather than wait again.
func (h *admissionHandler) rebuildRoutes(table *supervise.WebhookTable, seen *pathRoutes) *pathRoutes {
	h.routesMu.Lock()
	defer h.routesMu.Unlock()
	old := h.routes.Load()
	if old != nil && old.table == table && (old != seen || len(old.late) == 0) {
		return old
	}
	next := &pathRoutes{table: table, byPath: map[string]pathRoute{}, paths: map[*actor.PID]string{}}
	if table != nil {
		// The new webhooks are asked for their paths at once, side by
		// side, and the late ones waited for alongside: n of them wait
		// pathTimeout at most, not n times it.
		asked := map[*actor.PID]chan pathAnswer{}
		for _, rt := range table.Routes {
			if _, known := old.knows(rt.PID); !known {
				c := make(chan pathAnswer, 1)
				asked[rt.PID] = c
				call, again := old.lateCall(rt.PID)
				if !again {
					call = h.askPath(rt)
				}
				go func() { c <- h.awaitPath(rt, call, !again) }()
			}
		}
		for _, rt := range table.Routes {
			path, known := old.knows(rt.PID)
			if !known {
				a := <-asked[rt.PID]
				if a.late != nil {
					if next.late == nil {
						next.late = map[*actor.PID]<-chan string{}
					}
					next.late[rt.PID] = a.late
					continue
				}
				path = a.path
			}
			next.paths[rt.PID] = path
			if path == "" {
				continue
			}
			if other, dup := next.byPath[path]; dup {
				if !known {
					h.logger.Error("two webhooks have one path: the first added serves it", "path", path, "serving", other.Name, "ignored", rt.Name)
				}
				continue
			}
			next.byPath[path] = pathRoute{WebhookRoute: rt, abandoned: h.metrics.serving(path)}
		}
	}
	h.routes.Store(next)
	return next
}

// knows returns the path routes had for the webhook of pid, if any; a nil
// routes knows none.
func (routes *pathRoutes) knows(pid *actor.PID) (string, bool) {
	if routes == nil {
		return "", false
	}
	path, ok := routes.paths[pid]
	return path, ok
}

// serves reports whether routes has a webhook at path.
func (routes *pathRoutes) serves(path string) bool {
	_, ok := routes.byPath[path]
	return ok
}

// lateCall returns the Path() call of the webhook of pid that routes found
// late, if any; a nil routes has none.
func (routes *pathRoutes) lateCall(pid *actor.PID) (<-chan string, bool) {
	if routes == nil {
		return nil, false
	}
	c, ok := routes.late[pid]
	return c, ok
}

// pathAnswer is a webhook's Path() as awaitPath had it: its path ("" when
// it could not be had: the webhook is then not served), or, when it did
// not return within pathTimeout, the call to wait for again.
type pathAnswer struct {
	path string
	late <-chan string
}

// askPath asks a webhook for its Path(), in a goroutine of its own so that a
// Path that hangs or panics cannot hang or crash a request: the channel
// delivers the path once the call returns, "" when it could not be had
// (the failure is logged).
func (h *admissionHandler) askPath(rt supervise.WebhookRoute) <-chan string {
	done := make(chan string, 1)
	go func() {
		var path string
		err := childactor.Call(actors.KindWebhook, rt.Name, "Path", func() error { path = rt.Webhook.Path(); return nil })
		if err != nil {
			h.logger.Error("cannot serve a webhook: its Path panicked", "child", rt.Name, "err", err)
			path = ""
		} else if path == "" {
			h.logger.Error("cannot serve a webhook: its Path is empty", "child", rt.Name)
		} else if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		done <- path
	}()
	return done
}

// awaitPath waits pathTimeout at most for call, a Path() call of rt's:
// the path, or the call itself when it has not returned by then (logged
// the first time only).
func (h *admissionHandler) awaitPath(rt supervise.WebhookRoute, call <-chan string, first bool) pathAnswer {
	timer := time.NewTimer(pathTimeout)
	defer timer.Stop()
	select {
	case path := <-call:
		return pathAnswer{path: path}
	case <-timer.C:
		if first {
			h.logger.Error("cannot serve a webhook yet: its Path did not return; asked again by the next request for a path no webhook serves",
				"child", rt.Name, "timeout", pathTimeout)
		}
		return pathAnswer{late: call}
	}
}

// requestTimeout is the request's ?timeout= (as the API server sends it,
// e.g. "10s"; a bare number is seconds), at least 1s and capped at 30s, or
// def.
func requestTimeout(r *http.Request, def time.Duration) (time.Duration, error) {
	raw := r.URL.Query().Get("timeout")
	if raw == "" {
		return def, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		// A bare number is seconds, as in timeoutSeconds. One too large
		// for an int is still a number: Atoi then returns the int of
		// largest magnitude and its sign, so that it is capped at the
		// longest timeout (or refused as too short) like any other.
		n, nerr := strconv.Atoi(raw)
		if nerr != nil && !errors.Is(nerr, strconv.ErrRange) {
			return 0, fmt.Errorf("invalid ?timeout=%q: not a duration", raw)
		}
		d = time.Duration(min(n, int(maxTimeout/time.Second)+1)) * time.Second // no overflow: clamped below
	}
	if d < minTimeout {
		return 0, fmt.Errorf("invalid ?timeout=%q: less than %s", raw, minTimeout)
	}
	return min(d, maxTimeout), nil
}

// bodyBuffers recycles the buffers request bodies are read into, and
// reviewBuffers those answers are encoded into; buffers that grew past
// maxPooledBody are let go, so a burst of large reviews does not pin memory.
var (
	bodyBuffers   = sync.Pool{New: func() any { return new([]byte) }}
	reviewBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

const maxPooledBody = 256 << 10

func putBodyBuffer(buf *[]byte) {
	if cap(*buf) > maxPooledBody {
		return
	}
	*buf = (*buf)[:0]
	bodyBuffers.Put(buf)
}

func putReviewBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledBody {
		return
	}
	buf.Reset()
	reviewBuffers.Put(buf)
}

// firstBodyRead is the room a body is first given to arrive in (unless it
// claims less): a small review fits, and a client that claims a large body
// and sends nothing holds no more than this.
const firstBodyRead = 4 << 10

// readBody reads the request's body into *buf, up to limit bytes. The buffer
// grows with the bytes that have arrived, never ahead of them on the
// Content-Length the client claims: it is at most twice what has been read
// (and at least firstBodyRead), and never more than the claimed length (or
// limit, when none is claimed) plus one byte, the room in which the last read
// sees the end.
func readBody(buf *[]byte, w http.ResponseWriter, r *http.Request, limit int64) *admissionError {
	tooLarge := &admissionError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", limit)}
	if r.ContentLength > limit {
		return tooLarge
	}
	most := limit // the most the body can hold
	if r.ContentLength >= 0 {
		most = r.ContentLength
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	b := (*buf)[:0]
	defer func() { *buf = b }()
	for {
		if len(b) == cap(b) {
			next := min(max(2*len(b), firstBodyRead), int(most)+1)
			if next <= len(b) { // the body goes on past its claim: net/http ends it, but never spin here
				next = len(b) + firstBodyRead
			}
			grown := make([]byte, len(b), next)
			copy(grown, b)
			b = grown
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return tooLarge
			}
			return &admissionError{http.StatusBadRequest, fmt.Sprintf("cannot read request body: %v", err)}
		}
	}
	if len(b) == 0 {
		return &admissionError{http.StatusBadRequest, "request body is empty: want an AdmissionReview"}
	}
	return nil
}

// checkContentType refuses a request whose body is not declared JSON, as
// the API server always declares it: application/json, with or without
// parameters (charset=utf-8).
func checkContentType(r *http.Request) *admissionError {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return nil
	}
	return &admissionError{http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Type %q: want application/json", ct)}
}

// The apiVersions of AdmissionReview the handler takes.
var (
	admissionV1      = admissionv1.SchemeGroupVersion.String()
	admissionV1beta1 = admissionv1beta1.SchemeGroupVersion.String()
)

// decodeReview decodes an AdmissionReview of either apiVersion into the v1
// types: v1beta1's AdmissionReview has the same fields, JSON names and
// types (a test checks it field by field), so one decoding serves both, and
// the review is answered in the apiVersion it came in.
func decodeReview(body []byte, review *admissionv1.AdmissionReview) *admissionError {
	if err := json.Unmarshal(body, review); err != nil {
		return &admissionError{http.StatusBadRequest, fmt.Sprintf("request body is not an AdmissionReview: %v", err)}
	}
	switch {
	case review.APIVersion != admissionV1 && review.APIVersion != admissionV1beta1:
		return &admissionError{http.StatusBadRequest, fmt.Sprintf("unsupported apiVersion %q: want %s or %s", review.APIVersion, admissionV1, admissionV1beta1)}
	case review.Kind != "AdmissionReview":
		return &admissionError{http.StatusBadRequest, fmt.Sprintf("unsupported kind %q: want AdmissionReview", review.Kind)}
	case review.Request == nil:
		return &admissionError{http.StatusBadRequest, "AdmissionReview has no request"}
	case review.Request.UID == "":
		return &admissionError{http.StatusBadRequest, "AdmissionReview request has no uid"}
	}
	return nil
}

// denial is the response that denies req because its webhook failed.
func denial(req *admissionv1.AdmissionRequest, code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		UID:     req.UID,
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg},
	}
}

// writeReview answers with an AdmissionReview of the request's apiVersion.
func writeReview(w http.ResponseWriter, in *admissionv1.AdmissionReview, resp *admissionv1.AdmissionResponse) {
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: in.APIVersion, Kind: "AdmissionReview"},
		Response: resp,
	}
	buf := reviewBuffers.Get().(*bytes.Buffer)
	defer putReviewBuffer(buf)
	if err := json.NewEncoder(buf).Encode(&out); err != nil {
		writeAdmissionError(w, admissionError{http.StatusInternalServerError, fmt.Sprintf("cannot encode the AdmissionReview: %v", err)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, buf)
}

func writeAdmissionError(w http.ResponseWriter, e admissionError) {
	http.Error(w, e.reason, e.code)
}
