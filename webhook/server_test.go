package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/webhook"
)

// admCA signs serving certificates for 127.0.0.1, as cert-manager would.
type admCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newAdmCA(t *testing.T) *admCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &admCA{cert: cert, key: key, pool: pool}
}

// admPair is the PEM of a certificate and of its key.
type admPair struct{ cert, key []byte }

// issue returns a serving certificate with serial, and its key.
func (ca *admCA) issue(t *testing.T, serial int64) admPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "webhook.default.svc"},
		DNSNames: []string{"webhook.default.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der := ca.sign(t, tmpl, key)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return admPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// sign returns the DER of tmpl for key, signed by ca.
func (ca *admCA) sign(t *testing.T, tmpl *x509.Certificate, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// admCertFiles is a mounted Secret's tls.crt and tls.key.
type admCertFiles struct{ cert, key string }

func newAdmCertFiles(t *testing.T) admCertFiles {
	dir := t.TempDir()
	return admCertFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
}

func (f admCertFiles) write(t *testing.T, p admPair) {
	t.Helper()
	if err := os.WriteFile(f.cert, p.cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.key, p.key, 0o600); err != nil {
		t.Fatal(err)
	}
}

// admServeTLS serves handler with a WebhookServer on a loopback port until
// the end of the test.
func admServeTLS(t *testing.T, cfg webhook.ServerConfig) (addr string) {
	t.Helper()
	srv, err := webhook.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// admServerSerial makes a new TLS connection to addr and returns the serial
// of the certificate the server presented.
func admServerSerial(t *testing.T, addr string, roots *x509.CertPool) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestWebhookServerServesAdmissionAndProbesOverTLS(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 10))
	hook := newAdmHook("validate", "/validate")
	f := admServe(t, webhook.Config{}, nil, hook)
	addr := admServeTLS(t, webhook.ServerConfig{
		CertFile: files.cert, KeyFile: files.key, Handler: f.mgr.Handler(),
		Probes: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "probe "+r.URL.Path) }),
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	admDo(t, client, "POST", "https://"+addr+"/validate?timeout=10s", admBody(t, admV1)).
		wantReview(t, "admission.k8s.io/v1", "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	admDo(t, client, "POST", "https://"+addr+"/validate", admBody(t, admV1beta1)).
		wantReview(t, "admission.k8s.io/v1beta1", "0df28fbd-5f5f-11e8-bc74-36e6bb280816", true)
	for _, p := range []string{"/healthz", "/readyz", "/livez", "/readyz/verbose"} {
		if r := admDo(t, client, "GET", "https://"+addr+p, nil); r.code != 200 || r.text != "probe "+p {
			t.Errorf("%s: have %d %q", p, r.code, r.text)
		}
	}
	if r := admDo(t, client, "POST", "https://"+addr+"/healthzz", admBody(t, admV1)); r.code != 404 {
		t.Errorf("have %d for a path that is not a probe's", r.code)
	}

	// TLS 1.2 at least.
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, MinVersion: v, MaxVersion: v})
		if err == nil {
			conn.Close()
			t.Errorf("a TLS %s handshake succeeded", tls.VersionName(v))
		}
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS 1.2: %v", err)
	}
	conn.Close()
}

func TestWebhookServerReloadsRotatedCertificates(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 1))
	addr := admServeTLS(t, webhook.ServerConfig{
		CertFile: files.cert, KeyFile: files.key, Handler: http.NotFoundHandler(),
		CertCheckInterval: -1, // every handshake reads the files
		Logger:            admQuietLogger,
	})
	if s := admServerSerial(t, addr, ca.pool); s != 1 {
		t.Fatalf("have serial %d, want 1", s)
	}

	// cert-manager renews: the next handshake presents the new pair.
	files.write(t, ca.issue(t, 2))
	if s := admServerSerial(t, addr, ca.pool); s != 2 {
		t.Fatalf("have serial %d after the rotation, want 2", s)
	}

	// Caught half-written (a new certificate, the old key): the pair does
	// not match, and the server keeps the one it has.
	pair3 := ca.issue(t, 3)
	if err := os.WriteFile(files.cert, pair3.cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := admServerSerial(t, addr, ca.pool); s != 2 {
		t.Fatalf("have serial %d with a mismatched pair on disk, want 2", s)
	}
	// Garbage, or a file gone for a moment: the same.
	if err := os.WriteFile(files.key, []byte("-----BEGIN PRIVATE KEY-----\ntruncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := admServerSerial(t, addr, ca.pool); s != 2 {
		t.Fatalf("have serial %d with a garbled key on disk, want 2", s)
	}
	if err := os.Remove(files.key); err != nil {
		t.Fatal(err)
	}
	if s := admServerSerial(t, addr, ca.pool); s != 2 {
		t.Fatalf("have serial %d with the key missing, want 2", s)
	}
	// Once the pair is whole, it is served.
	if err := os.WriteFile(files.key, pair3.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if s := admServerSerial(t, addr, ca.pool); s != 3 {
		t.Fatalf("have serial %d once the pair is whole, want 3", s)
	}

	// kubelet's atomic update of a Secret volume: the files are symlinks
	// into a directory that is swapped.
	dir := t.TempDir()
	mount := admCertFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	swap := func(serial int64) {
		data := filepath.Join(dir, "..data-"+big.NewInt(serial).String())
		if err := os.Mkdir(data, 0o700); err != nil {
			t.Fatal(err)
		}
		admCertFiles{cert: filepath.Join(data, "tls.crt"), key: filepath.Join(data, "tls.key")}.write(t, ca.issue(t, serial))
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(data), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(20)
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	addr = admServeTLS(t, webhook.ServerConfig{
		CertFile: mount.cert, KeyFile: mount.key, Handler: http.NotFoundHandler(), CertCheckInterval: -1, Logger: admQuietLogger,
	})
	if s := admServerSerial(t, addr, ca.pool); s != 20 {
		t.Fatalf("have serial %d, want 20", s)
	}
	swap(21)
	if s := admServerSerial(t, addr, ca.pool); s != 21 {
		t.Fatalf("have serial %d after the volume's swap, want 21", s)
	}
}

func TestWebhookServerChecksTheFilesAtMostEveryInterval(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 1))
	addr := admServeTLS(t, webhook.ServerConfig{
		CertFile: files.cert, KeyFile: files.key, Handler: http.NotFoundHandler(), CertCheckInterval: time.Hour,
	})
	files.write(t, ca.issue(t, 2))
	if s := admServerSerial(t, addr, ca.pool); s != 1 {
		t.Errorf("have serial %d within the check interval, want 1", s)
	}
}

func TestNewWebhookServerValidates(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	pair := ca.issue(t, 1)
	files.write(t, pair)
	mismatched := newAdmCertFiles(t)
	mismatched.write(t, admPair{cert: pair.cert, key: ca.issue(t, 2).key})

	tests := []struct {
		name string
		cfg  webhook.ServerConfig
		want []string
	}{
		{"nothing", webhook.ServerConfig{}, []string{"certFile: required", "keyFile: required", "handler: required"}},
		{"missing files", webhook.ServerConfig{CertFile: files.cert + ".gone", KeyFile: files.key, Handler: http.NotFoundHandler()}, []string{"certFile:", "no such file"}},
		{"mismatched pair", webhook.ServerConfig{CertFile: mismatched.cert, KeyFile: mismatched.key, Handler: http.NotFoundHandler()}, []string{"private key does not match public key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := webhook.NewServer(tt.cfg)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("have %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestWebhookServerShutdown(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 1))
	srv, err := webhook.NewServer(webhook.ServerConfig{CertFile: files.cert, KeyFile: files.key, Handler: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	// Wait until it serves.
	admServerSerial(t, ln.Addr().String(), ca.pool)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	if err := srv.Serve(context.Background(), ln); err == nil {
		t.Error("a server served twice")
	}
}

// Start listens on Addr itself: an address it cannot listen on is an
// error that says so, and one it can is served until ctx ends.
func TestWebhookServerStartListensOnAddr(t *testing.T) {
	ca := newAdmCA(t)
	files := newAdmCertFiles(t)
	files.write(t, ca.issue(t, 1))

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy, err := webhook.NewServer(webhook.ServerConfig{Addr: taken.Addr().String(), CertFile: files.cert, KeyFile: files.key, Handler: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "webhook: server:") {
		t.Fatalf("Start on a taken address: %v, want an error naming the server", err)
	}

	// A free port, found by listening and closing: Start listens on it.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	srv, err := webhook.NewServer(webhook.ServerConfig{Addr: addr, CertFile: files.cert, KeyFile: files.key, Handler: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Start(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; { // until Start listens
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Start did not listen on %s: %v", addr, err)
		}
		select {
		case err := <-served:
			t.Fatalf("Start returned before it served: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	admServerSerial(t, addr, ca.pool)
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Start after its context ended: %v", err)
	}
}
