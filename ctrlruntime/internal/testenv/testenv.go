// Package testenv starts one real kube-apiserver and etcd per test binary,
// with controller-runtime's envtest, from the binaries hack/e2e-binaries.sh
// builds (KUBEBUILDER_ASSETS); tests that need it skip when that is empty.
package testenv

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	once    sync.Once
	env     *envtest.Environment
	config  *rest.Config
	started error
)

// Config returns the rest.Config of the shared API server, starting it on
// first use; it skips t when KUBEBUILDER_ASSETS is empty.
func Config(t testing.TB) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is empty: set it to the directory `hack/e2e-binaries.sh | tail -1` prints (kube-apiserver and etcd) to run the tests against a real API server")
	}
	once.Do(func() {
		env = &envtest.Environment{BinaryAssetsDirectory: assets}
		// envtest looks for kubectl beside the others but only runs it
		// for its Kubectl helper, which these tests do not use.
		if _, err := os.Stat(filepath.Join(assets, "kubectl")); err != nil {
			env.ControlPlane.KubectlPath = "/nonexistent/kubectl"
		}
		config, started = env.Start()
	})
	if started != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, started)
	}
	return rest.CopyConfig(config)
}

// Guard runs the tests, then stops the API server if one was started.
func Guard(m interface{ Run() int }) interface{ Run() int } { return guard{m} }

type guard struct{ m interface{ Run() int } }

func (g guard) Run() int {
	code := g.m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			os.Stderr.WriteString("testenv: stopping the API server: " + err.Error() + "\n")
		}
	}
	return code
}

// ListCounter counts the list requests a rest.Config's clients send, per
// resource ("configmaps"): plain lists and watch-lists.
type ListCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

// Wrap makes config's transport count on c.
func (c *ListCounter) Wrap(config *rest.Config) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			// A list is a GET of a collection, or (client-go's watch-list,
			// on by default since 1.35) a watch that first streams every
			// object: sendInitialEvents=true. A watch resumed from a
			// resourceVersion is not a list.
			isList := q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
			if r.Method == http.MethodGet && isList {
				if res, ok := listedResource(r.URL.Path); ok {
					c.mu.Lock()
					if c.counts == nil {
						c.counts = map[string]int{}
					}
					c.counts[res]++
					c.mu.Unlock()
					c.total.Add(1)
				}
			}
			return rt.RoundTrip(r)
		})
	})
}

// Lists returns the list requests sent for resource so far.
func (c *ListCounter) Lists(resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[resource]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// listedResource reports the resource of a collection path:
// /api/v1/configmaps, /api/v1/namespaces/ns/configmaps,
// /apis/group/version[/namespaces/ns]/resource.
func listedResource(path string) (string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", false
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "", false // GET of one namespace
		}
		parts = parts[2:]
	}
	if len(parts) != 1 {
		return "", false // one object, or a subresource
	}
	return parts[0], true
}

// Partition cuts a rest.Config's clients off the API server: while cut,
// every new request fails before it is sent (streams already open go on).
type Partition struct{ cut atomic.Bool }

// ErrPartitioned is what a cut client's requests fail with.
var ErrPartitioned = errors.New("testenv: partitioned from the API server")

// Wrap makes config's transport obey p.
func (p *Partition) Wrap(config *rest.Config) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if p.cut.Load() {
				return nil, ErrPartitioned
			}
			return rt.RoundTrip(r)
		})
	})
}

// Cut starts failing every request.
func (p *Partition) Cut() { p.cut.Store(true) }
