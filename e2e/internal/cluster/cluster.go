package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configures a control plane. The zero value works.
type Options struct {
	// BinDir holds the etcd and kube-apiserver binaries. Default: $KUBEBUILDER_ASSETS,
	// else the directory hack/e2e-binaries.sh builds them into.
	BinDir string
	// StartTimeout bounds the start of each process until it is ready (etcd's /health,
	// kube-apiserver's /readyz). Default: 60s; 0 or negative mean the default.
	StartTimeout time.Duration
	// StopTimeout is how long each process may take to exit after SIGTERM before it is
	// killed. Default: 30s; 0 or negative mean the default.
	StopTimeout time.Duration
	// APIServerFlags are appended to kube-apiserver's flags ("--feature-gates=..."); a
	// flag given twice takes its last value.
	APIServerFlags []string
}

func (o Options) withDefaults() Options {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
	return o
}

// Cluster is a running etcd and kube-apiserver. Stop it with Stop; Start does that in
// t.Cleanup.
type Cluster struct {
	dir   string
	creds *credentials
	url   string
	opts  Options

	// mu guards the processes and stopped: Guard's signal handler may stop a cluster
	// that is still starting.
	mu      sync.Mutex
	etcd    *Process
	server  *Process
	stopped bool

	// EtcdReady is how long etcd took from its start to a healthy /health.
	EtcdReady time.Duration
	// APIServerReady is how long kube-apiserver took from its start to a 200 from /readyz.
	APIServerReady time.Duration

	config     *rest.Config
	clientset  kubernetes.Interface
	kubeconfig string

	stopOnce sync.Once
	stopErr  error
}

// Start starts a control plane for t and stops it in t.Cleanup, failing t (with the
// tails of both logs) if it does not start, or if a process had died before the stop.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatalf("failed to start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs for the failed test:%s%s", c.server.logTail(), c.etcd.logTail())
		}
		stopStarted := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("failed to stop the control plane: %v", err)
		}
		t.Logf("control plane stopped in %s", time.Since(stopStarted).Round(time.Millisecond))
	})
	t.Logf("control plane at %s: etcd ready in %s, kube-apiserver ready in %s",
		c.url, c.EtcdReady.Round(time.Millisecond), c.APIServerReady.Round(time.Millisecond))
	return c
}

// New starts a control plane: etcd, then kube-apiserver, each waited for until ready.
// The caller must call Stop. On error, nothing it started is left running.
//
// Ports are picked free just before each process binds them; another program can take
// one in between, so a start whose process fails with "address already in use" is
// retried with fresh ports, up to three times.
func New(opts Options) (*Cluster, error) {
	opts = opts.withDefaults()
	bin, err := binDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	opts.BinDir = bin
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, err := start(opts)
		if err == nil || attempt == attempts || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
	}
}

func start(opts Options) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir, opts: opts}
	live.addCluster(c)
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			c = nil
		}
	}()

	if c.creds, err = writeCredentials(dir); err != nil {
		return c, fmt.Errorf("failed to write credentials: %w", err)
	}
	etcdPort, err := freePort()
	if err != nil {
		return c, err
	}
	apiPort, err := freePort()
	if err != nil {
		return c, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	c.url = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	startedAt := time.Now()
	etcd, err := c.startProcess(&c.etcd, "etcd", filepath.Join(opts.BinDir, "etcd"), []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		// Port 0: the single member never talks to peers, but etcd always listens.
		"--listen-peer-urls=http://127.0.0.1:0",
		// Durability is not under test; fsync would only make every write slower.
		"--unsafe-no-fsync=true",
	}, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return c, err
	}
	if err := waitReady(etcd, &http.Client{Transport: &http.Transport{}}, etcdURL+"/health", opts.StartTimeout); err != nil {
		return c, err
	}
	c.EtcdReady = time.Since(startedAt)

	startedAt = time.Now()
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + c.creds.servingCert,
		"--tls-private-key-file=" + c.creds.servingKey,
		"--token-auth-file=" + c.creds.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + c.url,
		"--service-account-key-file=" + c.creds.saPub,
		"--service-account-signing-key-file=" + c.creds.saKey,
		// A CIDR the apiserver allocates Service IPs from; no traffic goes there.
		"--service-cluster-ip-range=10.0.0.0/24",
		// With no kubelet, the kubernetes Service's endpoints would point at nothing;
		// "none" stops the apiserver from maintaining them.
		"--endpoint-reconciler-type=none",
		// No controller-manager creates default ServiceAccounts, so admission would
		// reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
	}
	server, err := c.startProcess(&c.server, "kube-apiserver", filepath.Join(opts.BinDir, "kube-apiserver"),
		append(args, opts.APIServerFlags...), filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return c, err
	}
	readyClient, err := c.httpClient()
	if err != nil {
		return c, err
	}
	if err := waitReady(server, readyClient, c.url+"/readyz", opts.StartTimeout); err != nil {
		return c, err
	}
	c.APIServerReady = time.Since(startedAt)

	c.config = &rest.Config{
		Host:            c.url,
		BearerToken:     c.creds.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.creds.caPEM},
	}
	if c.clientset, err = kubernetes.NewForConfig(c.Config()); err != nil {
		return c, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(c.kubeconfig); err != nil {
		return c, err
	}
	return c, nil
}

// errStopped reports a start cut short because the cluster was stopped meanwhile.
var errStopped = errors.New("cluster: stopped while starting")

// startProcess starts one of the cluster's processes and records it in *slot for Stop,
// unless Stop has begun, in which case the new process is killed at once.
func (c *Cluster) startProcess(slot **Process, name, path string, args []string, logPath string) (*Process, error) {
	p, err := startProcess(name, path, args, nil, logPath)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, errors.Join(errStopped, p.Kill())
	}
	*slot = p
	return p, nil
}

// URL is the apiserver's address, https://127.0.0.1:<port>.
func (c *Cluster) URL() string { return c.url }

// Token is the bearer token of a system:masters user.
func (c *Cluster) Token() string { return c.creds.token }

// CAData is the PEM of the CA that the apiserver's serving certificate chains to.
func (c *Cluster) CAData() []byte { return append([]byte(nil), c.creds.caPEM...) }

// Config returns a fresh copy of the admin client config; callers may change it.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Clientset is a clientset for the admin config.
func (c *Cluster) Clientset() kubernetes.Interface { return c.clientset }

// Kubeconfig is the path of a kubeconfig file for the admin user, for helper programs
// (pass it as --kubeconfig or $KUBECONFIG). It is removed by Stop.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// APIServer is the kube-apiserver process, for tests that restart or kill it.
func (c *Cluster) APIServer() *Process { return c.server }

// Etcd is the etcd process.
func (c *Cluster) Etcd() *Process { return c.etcd }

// WriteKubeconfig writes a kubeconfig for the admin user, with the CA and the token
// inline, so the file stands alone.
func (c *Cluster) WriteKubeconfig(path string) error { return c.writeKubeconfig(path, c.url) }

// writeKubeconfig is WriteKubeconfig with another server, one serving the apiserver's
// certificate (a Proxy).
func (c *Cluster) writeKubeconfig(path, server string) error {
	const name = "actorkube-e2e"
	config := clientcmdapi.NewConfig()
	config.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.CAData()}
	config.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.creds.token}
	config.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	config.CurrentContext = name
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return fmt.Errorf("failed to write kubeconfig %s: %w", path, err)
	}
	return nil
}

// Stop stops kube-apiserver, then etcd (the reverse of their start), each with SIGTERM
// and after Options.StopTimeout SIGKILL, then removes the cluster's directory. Both are
// stopped even if the first fails; the errors are joined. Calls after the first return
// the first one's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopped = true
		processes := []*Process{c.server, c.etcd}
		c.mu.Unlock()
		var errs []error
		for _, p := range processes {
			if p != nil {
				errs = append(errs, p.Stop(c.opts.StopTimeout))
			}
		}
		errs = append(errs, os.RemoveAll(c.dir))
		live.removeCluster(c)
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// httpClient is a plain HTTP client that trusts the cluster's CA and sends the admin
// token, for endpoints that are not API objects.
func (c *Cluster) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.creds.caPEM) {
		return nil, errors.New("failed to load the cluster CA")
	}
	return &http.Client{Transport: &bearerTransport{
		token: c.creds.token,
		next:  &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}}, nil
}

type bearerTransport struct {
	token string
	next  *http.Transport
}

func (b *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

func (b *bearerTransport) CloseIdleConnections() { b.next.CloseIdleConnections() }

// readyPollInterval is how often waitReady asks; a process becomes ready in seconds.
const readyPollInterval = 50 * time.Millisecond

// waitReady polls url until it answers 200, p exits, or timeout passes.
func waitReady(p *Process, client *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	defer client.CloseIdleConnections()
	ticker := time.NewTicker(readyPollInterval)
	defer ticker.Stop()
	var last string
	for {
		last = probe(ctx, client, url)
		if last == "" {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited before it was ready: %v%s", p.name, p.waitErr, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s within %s (last: %s)%s", p.name, url, timeout, last, p.logTail())
		case <-ticker.C:
		}
	}
}

// probe returns "" when url answers 200, else what it answered instead.
func probe(ctx context.Context, client *http.Client, url string) string {
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	return fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("failed to find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
