package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/actorkube/controllermanager/internal/defaults"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Addr is the address to listen on. Default ":9443", the port
	// webhook services conventionally target.
	Addr string
	// CertFile and KeyFile are the PEM files of the serving certificate (its
	// chain first) and its key, as cert-manager or kubelet write them into a
	// mounted Secret. Both are required. They are read again while the
	// server runs; see CertCheckInterval.
	CertFile, KeyFile string
	// Handler serves the admission requests; usually a manager's Handler().
	// Required.
	Handler http.Handler
	// Probes, when set, serves /healthz, /readyz and /livez (and the paths
	// under them), e.g. health.NewHandler(manager); every other path goes to
	// Handler. Default nil: every path goes to Handler.
	Probes http.Handler
	// CertCheckInterval is how often, at most, a TLS handshake re-reads the
	// certificate and key files to pick up a rotated pair. Default 10s;
	// negative: at every handshake.
	CertCheckInterval time.Duration
	// ReadHeaderTimeout bounds reading a request's headers: a client that
	// dribbles them (slowloris) is disconnected. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, its body included, from its
	// first byte. With HTTP/1.1, net/http also cancels the request's context
	// when it passes, so it bounds the time a request may take in all: keep
	// it at or above the longest timeoutSeconds of the webhook
	// configurations. Default 30s, the longest timeoutSeconds the API
	// server allows; negative: none.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of a request's headers to
	// the end of its answer. Default 35s, a little over ReadTimeout's
	// default; negative: none.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its next
	// request. Default 120s, longer than the API server's client keeps an
	// idle connection (90s), so that the client closes first; negative: none.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the size of a request's headers (the request line
	// included); a larger one is answered 431. Default 64 KiB, far above the
	// few hundred bytes the API server sends; negative: net/http's default,
	// 1 MiB.
	MaxHeaderBytes int
	// EnableHTTP2 serves HTTP/2 to clients that offer it by ALPN. Default
	// false: HTTP/1.1 only, as Kubernetes projects default since HTTP/2's
	// rapid-reset attack (CVE-2023-44487); the API server calls webhooks
	// over HTTP/1.1 as well. It decides: net/http adds or removes "h2" in the
	// NextProtos that TLSOpts may set to match it.
	EnableHTTP2 bool
	// ClientCAFile, when set, is a PEM bundle of the CAs that sign the
	// certificates clients must present: a client without a certificate
	// signed by one of them fails the TLS handshake. Set it to the CA of the
	// client certificate the API server presents to webhooks (configured in
	// its --admission-control-config-file). It is read once, by NewServer.
	// It cannot be set with Probes: kubelet's HTTPS probes present no client
	// certificate, so serve them on a port of their own. Default "": no
	// client certificate is asked for.
	ClientCAFile string
	// TLSOpts are applied in order to the server's tls.Config after its
	// defaults (TLS 1.2 or later, the reloaded certificate pair, the client
	// CAs of ClientCAFile), to raise MinVersion, restrict CipherSuites or
	// replace GetCertificate, as controller-runtime's webhook.Options.TLSOpts.
	// NewServer applies them once, to a throwaway config, to check them: a
	// nil or panicking one is an error. Default none.
	TLSOpts []func(*tls.Config)
	// ShutdownTimeout bounds the graceful shutdown that follows the end of
	// Start's context: requests still running after it have their
	// connections closed. Default 30s.
	ShutdownTimeout time.Duration
	// Logger receives TLS handshake errors (at Debug) and certificate
	// reload failures (at Error). Default: slog.Default() at Warn and above.
	Logger *slog.Logger
}

// Server serves admission webhooks over HTTPS, TLS 1.2 or later, with
// a certificate pair read from files and reloaded when they change on disk.
// It is hardened by default: HTTP/1.1 only, a bound on the time to read a
// request's headers, the whole request, the answer and an idle connection,
// and on the size of the headers; ClientCAFile makes it verify the API
// server's client certificate, and TLSOpts adjust the TLS configuration.
//
// Rotated files are picked up without a file watcher: a handshake re-reads
// both files when the last read is older than CertCheckInterval, and
// switches to the new pair once it has changed and parses; a pair caught
// half-written (the certificate rewritten, the key not yet) does not parse,
// so the server keeps the pair it has and reads the files again at the next
// check. Comparing contents rather than modification times also catches the
// atomic symlink swap kubelet uses for Secret volumes and rewrites within
// one timestamp tick. A server with no handshakes reads nothing, and there is
// no goroutine or timer to stop.
type Server struct {
	cfg       ServerConfig
	certs     *certReloader
	clientCAs *x509.CertPool // nil without ClientCAFile

	mu       sync.Mutex
	srv      *http.Server
	shutdown bool
}

// NewServer checks cfg and loads the certificate pair. Every problem
// is reported at once; a pair that cannot be loaded is an error.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = defaults.ServerAddr
	}
	if cfg.CertCheckInterval == 0 {
		cfg.CertCheckInterval = defaults.ServerCertCheckInterval
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = defaults.ServerReadHeaderTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = defaults.ServerShutdownTimeout
	}
	cfg.ReadTimeout = orDefault(cfg.ReadTimeout, DefaultServerReadTimeout)
	cfg.WriteTimeout = orDefault(cfg.WriteTimeout, DefaultServerWriteTimeout)
	cfg.IdleTimeout = orDefault(cfg.IdleTimeout, DefaultServerIdleTimeout)
	switch {
	case cfg.MaxHeaderBytes == 0:
		cfg.MaxHeaderBytes = DefaultServerMaxHeaderBytes
	case cfg.MaxHeaderBytes < 0:
		cfg.MaxHeaderBytes = 0 // net/http's default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(warnAndAbove{slog.Default().Handler()})
	}
	var errs []error
	if cfg.CertFile == "" {
		errs = append(errs, errors.New("certFile: required"))
	}
	if cfg.KeyFile == "" {
		errs = append(errs, errors.New("keyFile: required"))
	}
	if cfg.Handler == nil {
		errs = append(errs, errors.New("handler: required"))
	}
	if cfg.ClientCAFile != "" && cfg.Probes != nil {
		errs = append(errs, errors.New("probes: cannot be served with clientCAFile set (kubelet's HTTPS probes present no client certificate): serve them on a port of their own"))
	}
	s := &Server{cfg: cfg}
	if cfg.ClientCAFile != "" {
		pool, err := loadClientCAs(cfg.ClientCAFile)
		if err != nil {
			errs = append(errs, err)
		}
		s.clientCAs = pool
	}
	if len(errs) == 0 {
		s.certs = &certReloader{certFile: cfg.CertFile, keyFile: cfg.KeyFile, interval: cfg.CertCheckInterval, logger: cfg.Logger}
		if err := s.certs.reload(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if _, err := s.tlsConfig(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("webhook: invalid server: %w", err)
	}
	return s, nil
}

// The defaults of ServerConfig's timeouts and header limit
// (internal/defaults; docs/defaults.md lists every default of ServerConfig).
const (
	DefaultServerReadTimeout    = defaults.ServerReadTimeout
	DefaultServerWriteTimeout   = defaults.ServerWriteTimeout
	DefaultServerIdleTimeout    = defaults.ServerIdleTimeout
	DefaultServerMaxHeaderBytes = defaults.ServerMaxHeaderBytes
)

// orDefault is d, or def when d is 0; a negative d is 0, none.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// loadClientCAs reads a PEM bundle of CA certificates.
func loadClientCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("clientCAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("clientCAFile %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// tlsConfig is the server's TLS configuration: its defaults, then TLSOpts.
// A TLSOpts function that is nil or panics is an error naming it.
func (s *Server) tlsConfig() (cfg *tls.Config, err error) {
	cfg = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: s.certs.getCertificate,
	}
	if s.clientCAs != nil {
		cfg.ClientCAs = s.clientCAs
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	for i, opt := range s.cfg.TLSOpts {
		if opt == nil {
			return nil, fmt.Errorf("tlsOpts[%d]: nil", i)
		}
		if err := applyTLSOpt(opt, cfg); err != nil {
			return nil, fmt.Errorf("tlsOpts[%d]: %w", i, err)
		}
	}
	return cfg, nil
}

// applyTLSOpt runs opt on cfg; a panic in it is an error.
func applyTLSOpt(opt func(*tls.Config), cfg *tls.Config) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	opt(cfg)
	return nil
}

// Start listens on Addr and serves until ctx ends or Shutdown is called; see
// Serve.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("webhook: server: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves HTTPS on ln (which it closes) until ctx ends or Shutdown is
// called. When ctx ends, Serve shuts the server down gracefully: it stops
// accepting, waits up to ShutdownTimeout for the requests in progress, then
// closes the connections left; it returns nil. It returns an error when
// serving fails, or when the server was shut down already (a server serves
// once).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	tlsCfg, err := s.tlsConfig()
	if err != nil { // NewServer ran the same TLSOpts without error: one is not deterministic
		_ = ln.Close()
		return fmt.Errorf("webhook: server: %w", err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(s.cfg.EnableHTTP2)
	srv := &http.Server{
		Handler:           s.routes(),
		TLSConfig:         tlsCfg,
		Protocols:         &protocols,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	if s.shutdown || s.srv != nil {
		s.mu.Unlock()
		_ = ln.Close()
		return errors.New("webhook: server: already served")
	}
	s.srv = srv
	s.mu.Unlock()

	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // Shutdown was called
		}
		return fmt.Errorf("webhook: server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		<-served
		return nil
	}
}

// Shutdown stops the server gracefully: it stops accepting connections, then
// waits for the requests in progress to be answered, or for ctx to end,
// whichever is first; when ctx ends first it closes the connections left
// and returns ctx's error. A server not serving yet never will.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return err
	}
	return nil
}

// routes sends the probe paths to Probes, when set, and the rest to Handler.
func (s *Server) routes() http.Handler {
	if s.cfg.Probes == nil {
		return s.cfg.Handler
	}
	probes, webhooks := s.cfg.Probes, s.cfg.Handler
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range []string{"/healthz", "/readyz", "/livez"} {
			if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
				probes.ServeHTTP(w, r)
				return
			}
		}
		webhooks.ServeHTTP(w, r)
	})
}

// certReloader serves the certificate pair in two files, reading them again
// at a handshake when the last read is older than interval.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	logger            *slog.Logger

	cert      atomic.Pointer[tls.Certificate]
	checkedAt atomic.Int64 // unix nanoseconds of the last read

	mu       sync.Mutex // one reload at a time; handshakes never wait for it
	certPEM  []byte
	keyPEM   []byte
	lastFail string // the last reload failure logged, not to log it again
}

func (c *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := time.Now().UnixNano()
	if c.interval < 0 || time.Duration(now-c.checkedAt.Load()) >= c.interval {
		if c.mu.TryLock() { // another handshake is reloading: serve the pair there is
			c.checkedAt.Store(now)
			err := c.reloadLocked()
			c.mu.Unlock()
			if err != nil {
				c.logFailure(err)
			}
		}
	}
	return c.cert.Load(), nil
}

// reload reads the files and, when they have changed and parse, switches to
// the new pair.
func (c *certReloader) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkedAt.Store(time.Now().UnixNano())
	return c.reloadLocked()
}

func (c *certReloader) reloadLocked() error {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return fmt.Errorf("certFile: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return fmt.Errorf("keyFile: %w", err)
	}
	if bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certFile %s, keyFile %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert.Store(&cert)
	c.certPEM, c.keyPEM = certPEM, keyPEM
	c.lastFail = ""
	return nil
}

func (c *certReloader) logFailure(err error) {
	c.mu.Lock()
	repeated := c.lastFail == err.Error()
	c.lastFail = err.Error()
	c.mu.Unlock()
	if !repeated {
		c.logger.Error("cannot reload the webhook server's certificate: serving the previous one", "err", err)
	}
}

// warnAndAbove drops the records below Warn (defaults.LogLevel): the
// server's default logger reports certificate failures, not every client's
// failed handshake.
type warnAndAbove struct{ next slog.Handler }

func (h warnAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= defaults.LogLevel && h.next.Enabled(ctx, l)
}
func (h warnAndAbove) Handle(ctx context.Context, r slog.Record) error { return h.next.Handle(ctx, r) }
func (h warnAndAbove) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnAndAbove{h.next.WithAttrs(attrs)}
}
func (h warnAndAbove) WithGroup(name string) slog.Handler {
	return warnAndAbove{h.next.WithGroup(name)}
}
