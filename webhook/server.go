package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
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
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout time.Duration
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
	cfg   ServerConfig
	certs *certReloader

	mu       sync.Mutex
	srv      *http.Server
	shutdown bool
}

// NewServer checks cfg and loads the certificate pair. Every problem
// is reported at once; a pair that cannot be loaded is an error.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = ":9443"
	}
	if cfg.CertCheckInterval == 0 {
		cfg.CertCheckInterval = 10 * time.Second
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
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
	var certs *certReloader
	if len(errs) == 0 {
		certs = &certReloader{certFile: cfg.CertFile, keyFile: cfg.KeyFile, interval: cfg.CertCheckInterval, logger: cfg.Logger}
		if err := certs.reload(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("webhook: invalid server: %w", err)
	}
	return &Server{cfg: cfg, certs: certs}, nil
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
	srv := &http.Server{
		Handler: s.routes(),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: s.certs.getCertificate,
		},
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
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

// warnAndAbove drops the records below Warn: the server's default logger
// reports certificate failures, not every client's failed handshake.
type warnAndAbove struct{ next slog.Handler }

func (h warnAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.next.Enabled(ctx, l)
}
func (h warnAndAbove) Handle(ctx context.Context, r slog.Record) error { return h.next.Handle(ctx, r) }
func (h warnAndAbove) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnAndAbove{h.next.WithAttrs(attrs)}
}
func (h warnAndAbove) WithGroup(name string) slog.Handler {
	return warnAndAbove{h.next.WithGroup(name)}
}
