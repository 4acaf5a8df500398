package webhook_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/webhook"
)

// admHardened is a server with a fresh CA and certificate pair, serving
// handler (a plain one unless the test needs a manager).
type admHardened struct {
	ca    *admCA
	files admCertFiles
}

func newAdmHardened(t *testing.T) *admHardened {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 10))
	return &admHardened{ca: ca, files: files}
}

// serve starts a server with cfg, its files and handler filled in.
func (h *admHardened) serve(t *testing.T, cfg webhook.ServerConfig) string {
	t.Helper()
	cfg.CertFile, cfg.KeyFile = h.files.cert, h.files.key
	if cfg.Handler == nil {
		cfg.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	}
	return admServeTLS(t, cfg)
}

// dial opens a TLS connection that will not wait past admWait.
func (h *admHardened) dial(t *testing.T, addr string, cfg *tls.Config) *tls.Conn {
	t.Helper()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.RootCAs, cfg.ServerName = h.ca.pool, "127.0.0.1"
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(admWait)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// wantClosedByServer reads conn to its end and fails unless the server
// closed it (as opposed to the test's own deadline passing).
func wantClosedByServer(t *testing.T, conn net.Conn, what string) string {
	t.Helper()
	b, err := io.ReadAll(conn)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open for %s", what, admWait)
	}
	return string(b)
}

func TestWebhookServerServesHTTP1OnlyUnlessHTTP2IsEnabled(t *testing.T) {
	h := newAdmHardened(t)
	for _, tt := range []struct {
		name string
		cfg  webhook.ServerConfig
		want string
	}{
		{"default", webhook.ServerConfig{}, "http/1.1"},
		{"TLSOpts offering h2", webhook.ServerConfig{TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"h2", "http/1.1"} }}}, "http/1.1"},
		{"EnableHTTP2", webhook.ServerConfig{EnableHTTP2: true}, "h2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := h.serve(t, tt.cfg)
			conn := h.dial(t, addr, &tls.Config{NextProtos: []string{"h2", "http/1.1"}})
			if have := conn.ConnectionState().NegotiatedProtocol; have != tt.want {
				t.Errorf("ALPN: have %q, want %q", have, tt.want)
			}
			// And what an HTTP client that prefers HTTP/2 gets.
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca.pool}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get("https://" + addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if wantMajor := map[string]int{"h2": 2, "http/1.1": 1}[tt.want]; resp.ProtoMajor != wantMajor {
				t.Errorf("have %s, want HTTP/%d", resp.Proto, wantMajor)
			}
		})
	}
}

func TestWebhookServerAppliesTLSOpts(t *testing.T) {
	h := newAdmHardened(t)
	var applied atomic.Int32 // NewServer applies the options, and Serve again
	addr := h.serve(t, webhook.ServerConfig{TLSOpts: []func(*tls.Config){
		func(c *tls.Config) { applied.Add(1) },
		func(c *tls.Config) { c.MinVersion = tls.VersionTLS13 },
	}})
	if applied.Load() < 1 {
		t.Errorf("TLSOpts[0] not applied")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.ca.pool, MaxVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Error("a TLS 1.2 handshake succeeded with MinVersion raised to 1.3 by TLSOpts")
	}
	if v := h.dial(t, addr, nil).ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("have %s, want TLS 1.3", tls.VersionName(v))
	}

	// A nil or panicking option is refused by NewServer, by its index.
	for _, tt := range []struct {
		opts []func(*tls.Config)
		want string
	}{
		{[]func(*tls.Config){func(*tls.Config) {}, nil}, "tlsOpts[1]: nil"},
		{[]func(*tls.Config){func(*tls.Config) { panic("no cipher for you") }}, "tlsOpts[0]: panicked: no cipher for you"},
	} {
		_, err := webhook.NewServer(webhook.ServerConfig{CertFile: h.files.cert, KeyFile: h.files.key, Handler: http.NotFoundHandler(), TLSOpts: tt.opts})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("have %v, want an error with %q", err, tt.want)
		}
	}
}

// issueClient returns a client certificate signed by ca, as the API
// server's for calling webhooks.
func (ca *admCA) issueClient(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(99), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return tls.Certificate{Certificate: [][]byte{ca.sign(t, tmpl, key)}, PrivateKey: key}
}

func TestWebhookServerVerifiesClientCertificates(t *testing.T) {
	h := newAdmHardened(t)
	apiServerCA, otherCA := newAdmCA(t), newAdmCA(t)
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiServerCA.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	addr := h.serve(t, webhook.ServerConfig{ClientCAFile: caFile, Handler: f.mgr.Handler()})

	post := func(certs []tls.Certificate) (admReply, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca.pool, Certificates: certs}}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/validate", strings.NewReader(string(admBody(t, admV1))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: tr, Timeout: admWait}).Do(req)
		if err != nil {
			return admReply{}, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return admReply{code: resp.StatusCode, text: string(b)}, nil
	}
	if r, err := post([]tls.Certificate{apiServerCA.issueClient(t)}); err != nil || r.code != 200 {
		t.Errorf("with the API server's certificate: have %v %d %q, want 200", err, r.code, r.text)
	}
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's certificate": {otherCA.issueClient(t)}} {
		if r, err := post(certs); err == nil {
			t.Errorf("%s: have %d %q, want the handshake refused", name, r.code, r.text)
		}
	}
	if n := hook.handled.Load(); n != 1 {
		t.Errorf("Handle ran %d times, want 1 (refused clients never reach it)", n)
	}

	// Bad configurations are refused by NewServer, each by its field.
	garbage := filepath.Join(t.TempDir(), "garbage.crt")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg  webhook.ServerConfig
		want string
	}{
		{webhook.ServerConfig{ClientCAFile: filepath.Join(t.TempDir(), "missing.crt")}, "clientCAFile: open"},
		{webhook.ServerConfig{ClientCAFile: garbage}, "no PEM certificate"},
		{webhook.ServerConfig{ClientCAFile: caFile, Probes: http.NotFoundHandler()}, "probes: cannot be served with clientCAFile set"},
	} {
		tt.cfg.CertFile, tt.cfg.KeyFile, tt.cfg.Handler = h.files.cert, h.files.key, http.NotFoundHandler()
		if _, err := webhook.NewServer(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("have %v, want an error with %q", err, tt.want)
		}
	}
}

func TestWebhookServerTimeouts(t *testing.T) {
	h := newAdmHardened(t)
	// Long enough for a TLS handshake on a loaded machine (ReadTimeout and
	// WriteTimeout bound it too), short enough to wait out.
	const short = time.Second

	t.Run("headers dribbled (slowloris)", func(t *testing.T) {
		addr := h.serve(t, webhook.ServerConfig{ReadHeaderTimeout: short})
		conn := h.dial(t, addr, nil)
		if _, err := io.WriteString(conn, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"); err != nil {
			t.Fatal(err)
		}
		// The headers never end: the server must hang up.
		wantClosedByServer(t, conn, "unfinished headers")
	})

	t.Run("body dribbled", func(t *testing.T) {
		read := make(chan error, 1)
		addr := h.serve(t, webhook.ServerConfig{ReadTimeout: short, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			read <- err
		})})
		conn := h.dial(t, addr, nil)
		if _, err := io.WriteString(conn, "POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\""); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-read:
			if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
				t.Errorf("the handler's body read: have %v, want a timeout", err)
			}
		case <-time.After(admWait):
			t.Fatalf("the body read did not end within %s", admWait)
		}
		wantClosedByServer(t, conn, "unfinished body")
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		addr := h.serve(t, webhook.ServerConfig{IdleTimeout: short})
		conn := h.dial(t, addr, nil)
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: webhook\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("have %d, close %v, want a kept-alive 200", resp.StatusCode, resp.Close)
		}
		wantClosedByServer(t, conn, "an idle connection")
	})

	t.Run("answer later than WriteTimeout", func(t *testing.T) {
		written := make(chan error, 1)
		addr := h.serve(t, webhook.ServerConfig{WriteTimeout: short, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A handler slower than WriteTimeout: its answer cannot be sent.
			slow := time.NewTimer(3 * short)
			defer slow.Stop()
			<-slow.C
			_, err := io.WriteString(w, strings.Repeat("late ", 1<<14))
			if err == nil {
				err = http.NewResponseController(w).Flush()
			}
			written <- err
		})})
		conn := h.dial(t, addr, nil)
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: webhook\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if text := wantClosedByServer(t, conn, "a late answer"); strings.Contains(text, "late") {
			t.Errorf("the late answer reached the client: %.60q", text)
		}
		if err := <-written; err == nil {
			t.Error("the late answer was written without error")
		}
	})

	t.Run("headers over MaxHeaderBytes", func(t *testing.T) {
		addr := h.serve(t, webhook.ServerConfig{MaxHeaderBytes: 1 << 10})
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca.pool}}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: admWait}
		for _, tt := range []struct {
			size int
			want int
		}{{100, 200}, {16 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
			req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Padding", strings.Repeat("x", tt.size))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("a %d-byte header: have %d, want %d", tt.size, resp.StatusCode, tt.want)
			}
		}
	})
}

// TestWebhookServerDefaults: a server configured with nothing but its
// files serves with the documented hardening.
func TestWebhookServerDefaults(t *testing.T) {
	for _, tt := range []struct {
		name       string
		have, want any
	}{
		{"DefaultServerReadTimeout", webhook.DefaultServerReadTimeout, 30 * time.Second},
		{"DefaultServerWriteTimeout", webhook.DefaultServerWriteTimeout, 35 * time.Second},
		{"DefaultServerIdleTimeout", webhook.DefaultServerIdleTimeout, 120 * time.Second},
		{"DefaultServerMaxHeaderBytes", webhook.DefaultServerMaxHeaderBytes, 64 << 10},
	} {
		if tt.have != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.have, tt.want)
		}
	}
	h := newAdmHardened(t)
	addr := h.serve(t, webhook.ServerConfig{})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.ca.pool}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 100<<10)) // over 64 KiB, under net/http's 1 MiB
	resp, err := (&http.Client{Transport: tr, Timeout: admWait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 100 KiB header with the defaults: have %d, want 431", resp.StatusCode)
	}
}
