package kubebuilder_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started by client-go's first log line.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// controller-runtime's own priority queue, in the test that runs
		// the tutorial on controller-runtime's manager: its ready-items
		// goroutine can still be blocked on a send after the manager
		// stopped (seen once in CI, v0.24.1, priorityqueue.go:400).
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems.func1.1"),
		// Blocked for good behind it on the queue's lock, which that send holds.
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleAddBuffer"),
		// And so is handleWaitingItems when a waiting item (a RequeueAfter) came
		// due after that send stuck: seen once in CI (stop 62, ctrlruntime/fleet).
		goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleWaitingItems.func1"),
	)
}

// syncBuffer is a bytes.Buffer the child process's output may be copied
// into while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually polls cond every 10 ms until it holds or a minute passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not within a minute: %v", what, err)
	}
}

func status(url string, insecure bool) int {
	c := &http.Client{Timeout: 5 * time.Second}
	if insecure {
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // its own certificate
		defer c.CloseIdleConnections()
	}
	res, err := c.Get(url)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// cmd/main.go, built and run as kubebuilder's Makefile runs it, against a
// real API server: it reconciles a Greeting, answers its probes, serves
// metrics behind the scaffold's authn/authz filters, and exits 0 on
// SIGTERM, its Lease released.
func TestManagerBinaryRunsAgainstTheAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is empty: no kube-apiserver and etcd to run the binary against")
	}
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd: %v\n%s", err, out)
	}

	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = demov1.AddToScheme(scheme)
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	probeAddr, metricsAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "--leader-elect", "--health-probe-bind-address="+probeAddr,
		"--metrics-bind-address="+metricsAddr, "--kubeconfig="+kubeconfigPath)
	run.Env = append(os.Environ(), "ENABLE_WEBHOOKS=false", "POD_NAMESPACE=default")
	var output syncBuffer
	run.Stdout, run.Stderr = &output, &output
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("the binary's output:\n%s", output.String())
		}
	}()

	eventually(t, "/readyz 200", func() bool { return status("http://"+probeAddr+"/readyz", false) == http.StatusOK })
	greeting := &demov1.Greeting{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "from-binary"},
		Spec: demov1.GreetingSpec{Message: "hi", Copies: 1}}
	if err := cl.Create(ctx, greeting); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the binary's reconciler creates the ConfigMap", func() bool {
		return cl.Get(ctx, types.NamespacedName{Namespace: "default", Name: "from-binary-0"}, &corev1.ConfigMap{}) == nil
	})
	if code := status("http://"+probeAddr+"/healthz", false); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	// The scaffold's secure metrics: HTTPS, and a request without a token
	// is refused by the authn/authz filter.
	eventually(t, "metrics served behind the filters", func() bool {
		code := status("https://"+metricsAddr+"/metrics", true)
		return code == http.StatusUnauthorized || code == http.StatusForbidden
	})

	// The reconciler logs through the manager's logger, with
	// controller-runtime's fields (zap's development encoding).
	for _, field := range []string{`"controller": "greeting"`, `"controllerGroup": "demo.example.com"`, `"controllerKind": "Greeting"`,
		`"Greeting": {"name":"from-binary","namespace":"default"}`, `"reconcileID": "`} {
		eventually(t, "a log line with "+field, func() bool { return strings.Contains(output.String(), field) })
	}

	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the binary exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the binary did not exit within a minute of SIGTERM")
	}
}
