package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// handProvider is a ClusterProvider the test drives: engage and
// disengage from the test.
type handProvider struct {
	mu        sync.Mutex
	engage    func(string, *rest.Config) error
	disengage func(string)
	ready     chan struct{}
	once      sync.Once
}

func newHandProvider() *handProvider { return &handProvider{ready: make(chan struct{})} }

func (p *handProvider) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	p.mu.Lock()
	p.engage, p.disengage = engage, disengage
	p.mu.Unlock()
	p.once.Do(func() { close(p.ready) })
	<-ctx.Done()
	return nil
}

func (p *handProvider) funcs(t *testing.T) (func(string, *rest.Config) error, func(string)) {
	t.Helper()
	select {
	case <-p.ready:
	case <-time.After(waitFor):
		t.Fatal("the provider never ran")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.engage, p.disengage
}

// stubborn reconciles ns's objects, the first one blocking, deaf to its
// context, until released; it records how many reconciles of one key run
// at once.
type stubborn struct {
	ns      string
	release chan struct{}
	entered chan struct{}
	once    sync.Once

	mu      sync.Mutex
	running map[string]int
	overlap int
	total   int
}

func (s *stubborn) Reconcile(_ context.Context, req fleet.Request) (reconcile.Result, error) {
	if req.Namespace != s.ns {
		return reconcile.Result{}, nil
	}
	key := req.String()
	s.mu.Lock()
	s.running[key]++
	s.total++
	if s.running[key] > 1 {
		s.overlap++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running[key]--
		s.mu.Unlock()
	}()
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release // deaf to ctx
	}
	return reconcile.Result{}, nil
}

func (s *stubborn) counts() (overlap, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlap, s.total
}

// Member a's config is rotated (a new token, say: here a new user agent)
// while its reconciler is mid-Reconcile and deaf to its context: the old
// subtree's Shutdown gives up after ShutdownTimeout, and the new subtree
// reconciles the same object. The same key of the same cluster must not be
// reconciled twice at once, whichever subtree runs it.
func TestEnvAttackRotateWhileReconcileIgnoresContext(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "rot-" + rand.String(6)
	newNamespace(t, cl, ns)
	createSecret(t, cl, ns, "one")
	r := &stubborn{ns: ns, release: make(chan struct{}), entered: make(chan struct{}), running: map[string]int{}}
	released := false
	t.Cleanup(func() {
		if !released {
			close(r.release)
		}
	})
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).For(&corev1.Secret{}).Complete(r))
	p := newHandProvider()
	f := cm.NewFleet("fleet", p, mgr.Build, fastProbes)
	startManager(t, nil, cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{ShutdownTimeout: fastProbes.Supervision.ShutdownTimeout}}, f)
	engage, _ := p.funcs(t)
	require.NoError(t, engage("a", rest.CopyConfig(config)))
	select {
	case <-r.entered:
	case <-time.After(waitFor):
		t.Fatal("never reconciled")
	}
	rotated := rest.CopyConfig(config)
	rotated.UserAgent = "rotated"
	before, err := mgr.GetCluster(context.Background(), "a")
	require.NoError(t, err)
	require.NoError(t, engage("a", rotated))
	require.Eventually(t, func() bool {
		now, err := mgr.GetCluster(context.Background(), "a")
		return err == nil && now != before
	}, waitFor, 20*time.Millisecond, "a never ran on its rotated config")
	// The new subtree reconciles: "two" goes through, "one" waits for
	// the deaf reconcile of the old subtree, and goes through once it
	// returns.
	createSecret(t, cl, ns, "two")
	require.Eventually(t, func() bool { _, total := r.counts(); return total >= 2 }, waitFor, 20*time.Millisecond)
	released = true
	close(r.release)
	require.Eventually(t, func() bool { _, total := r.counts(); return total >= 3 }, waitFor, 20*time.Millisecond)
	overlap, total := r.counts()
	require.Zero(t, overlap, "a key of cluster a reconciled twice at once (of %d)", total)
}
