package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a reverse proxy on loopback in front of a cluster's kube-apiserver, in this
// process: HTTPS with the apiserver's own serving certificate (valid for 127.0.0.1 on any
// port, so a client trusts it with the cluster's CA), forwarding every request, watches
// streamed, to the apiserver over HTTPS. The client's own bearer token passes through.
// Delay says how long a request waits before it is forwarded; the proxy records every
// Lease request it forwarded.
//
// Start one with StartProxy; point a helper program at it with Kubeconfig.
type Proxy struct {
	url        string
	kubeconfig string
	server     *http.Server
	upstream   *http.Transport
	serveDone  chan struct{}
	delay      func(*http.Request) time.Duration

	// mu guards closed, requests and the count of handlers: a handler that begins once
	// stop has begun answers 503 rather than racing stop's wait.
	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
	requests []LeaseRequest
}

// LeaseRequest is one request for coordination.k8s.io Leases the proxy forwarded.
type LeaseRequest struct {
	// Verb is the API server's word for it: GET, LIST, WATCH, CREATE (POST), UPDATE
	// (PUT), PATCH, DELETE, DELETECOLLECTION.
	Verb string
	// Code is the HTTP status the apiserver answered, 0 when the client gave up first
	// (its timeout, its process stopping), 502 when the upstream failed.
	Code int
	// Received is when the proxy received the request; Delayed how long it held it
	// before forwarding; Took how long the apiserver took from the forward until the
	// whole answer was passed on (for a watch, its life).
	Received time.Time
	Delayed  time.Duration
	Took     time.Duration
}

// IsLeaseWrite reports whether req writes coordination.k8s.io Leases: POST, PUT, PATCH
// or DELETE under /apis/coordination.k8s.io/<version>/…/leases.
func IsLeaseWrite(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return isLeasePath(req.URL.Path)
	}
	return false
}

// isLeasePath: /apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>] or
// /apis/coordination.k8s.io/v1/leases.
func isLeasePath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/apis/coordination.k8s.io/")
	if !ok {
		return false
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	// v1 leases | v1 namespaces ns leases [name]
	return (len(parts) == 2 && parts[1] == "leases") ||
		(len(parts) >= 4 && parts[1] == "namespaces" && parts[3] == "leases")
}

func leaseVerb(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	collection := parts[len(parts)-1] == "leases"
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "WATCH"
		case collection:
			return "LIST"
		}
		return "GET"
	case http.MethodPost:
		return "CREATE"
	case http.MethodPut:
		return "UPDATE"
	case http.MethodDelete:
		if collection {
			return "DELETECOLLECTION"
		}
		return "DELETE"
	}
	return req.Method
}

// StartProxy starts a proxy in front of c's apiserver and stops it in t.Cleanup: start it
// before the programs that use it, so that they are stopped first (t.Cleanup runs last
// in, first out). delay may be nil (no delay).
func StartProxy(t testing.TB, c *Cluster, delay func(*http.Request) time.Duration) *Proxy {
	t.Helper()
	p, err := newProxy(c, delay, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

func newProxy(c *Cluster, delay func(*http.Request) time.Duration, dir string) (*Proxy, error) {
	if delay == nil {
		delay = func(*http.Request) time.Duration { return 0 }
	}
	target, err := url.Parse(c.url)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.creds.caPEM) {
		return nil, errors.New("failed to load the cluster CA")
	}
	cert, err := tls.LoadX509KeyPair(c.creds.servingCert, c.creds.servingKey)
	if err != nil {
		return nil, fmt.Errorf("failed to load the serving certificate: %w", err)
	}
	p := &Proxy{
		delay:     delay,
		serveDone: make(chan struct{}),
		upstream: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
			// Every replica's requests share the proxy's connections: do not make
			// concurrent renewals queue for one.
			MaxIdleConnsPerHost: 100,
		},
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
		},
		Transport: p.upstream,
		// Watches are streamed as the apiserver writes them.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return // the client gave up (a timeout, its process stopping): nobody to answer
			}
			log.Printf("cluster proxy: %s %s: %v", req.Method, req.URL.Path, err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "https://" + ln.Addr().String()
	p.server = &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { p.serve(rp, w, req) }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() {
		defer close(p.serveDone)
		_ = p.server.ServeTLS(ln, "", "")
	}()
	p.kubeconfig = dir + "/kubeconfig-proxy"
	if err := c.writeKubeconfig(p.kubeconfig, p.url); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// statusRecorder keeps the status a handler wrote; it passes Flush on, so that
// ReverseProxy streams a watch.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *Proxy) serve(rp *httputil.ReverseProxy, w http.ResponseWriter, req *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		http.Error(w, "the proxy is stopping", http.StatusServiceUnavailable)
		return
	}
	p.handlers.Add(1)
	p.mu.Unlock()
	defer p.handlers.Done()
	received := time.Now()
	delay := p.delay(req)
	if delay > 0 {
		// The request waits here as if the apiserver were slow to answer it; a client
		// that gives up meanwhile sends nothing upstream.
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			p.record(req, 0, received, delay, 0)
			return
		}
	}
	rec := &statusRecorder{ResponseWriter: w}
	forwarded := time.Now()
	rp.ServeHTTP(rec, req)
	p.record(req, rec.code, received, delay, time.Since(forwarded))
}

func (p *Proxy) record(req *http.Request, code int, received time.Time, delay, took time.Duration) {
	if !isLeasePath(req.URL.Path) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, LeaseRequest{Verb: leaseVerb(req), Code: code, Received: received, Delayed: delay, Took: took})
}

// URL is the proxy's address, https://127.0.0.1:<port>.
func (p *Proxy) URL() string { return p.url }

// Kubeconfig is the path of a kubeconfig for the admin user whose server is the proxy.
func (p *Proxy) Kubeconfig() string { return p.kubeconfig }

// LeaseRequests returns the Lease requests forwarded (or given up during their delay)
// so far, in the order they ended; a watch is recorded when it ends.
func (p *Proxy) LeaseRequests() []LeaseRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]LeaseRequest(nil), p.requests...)
}

// stop closes the listener and every connection, then waits for the handlers, whose
// requests fail once their client connection is gone.
func (p *Proxy) stop() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.server.Close()
	<-p.serveDone
	p.handlers.Wait()
	p.upstream.CloseIdleConnections()
}
