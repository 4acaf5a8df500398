package fleet_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// slow makes every request of config, the fleet's probes aside, answer
// 100 ms late, and counts those of its store's first request (the
// discovery of its first informer) sent.
func slow(config *rest.Config, started *atomic.Int32) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path != "/readyz" {
				started.Add(1)
			}
			select { // the link's latency, not a synchronisation
			case <-time.After(100 * time.Millisecond):
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
			return rt.RoundTrip(r)
		})
	})
}

// Member a's API server answers in 100 ms; its config is rotated while
// its store's cache is syncing on the first: the first cache is dropped
// (its requests stop), a runs on the rotated config's cache, and
// reconciles.
func TestEnvAttackRotateWhileSlowCacheSyncs(t *testing.T) {
	config := testenv.Config(t)
	cl, err := client.New(config, client.Options{})
	require.NoError(t, err)
	ns := "srot-" + rand.String(6)
	newNamespace(t, cl, ns)
	var first, second atomic.Int32
	c1, c2 := rest.CopyConfig(config), rest.CopyConfig(config)
	c2.UserAgent = "rotated"
	slow(c1, &first)
	slow(c2, &second)
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).Named("mirror").For(&corev1.Secret{}).Complete(&mirror{mgr: mgr, ns: ns}))
	p := newHandProvider()
	f := cm.NewFleet("fleet", p, mgr.Build, fastProbes)
	startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	engage, _ := p.funcs(t)
	require.NoError(t, engage("a", c1))
	require.Eventually(t, func() bool { return first.Load() > 0 }, waitFor, 5*time.Millisecond, "a's store never started")
	require.NoError(t, engage("a", c2))
	require.Eventually(t, func() bool {
		_, err := mgr.GetCluster(context.Background(), "a")
		return err == nil && second.Load() > 0
	}, waitFor, 20*time.Millisecond, "a never ran on its rotated config")
	createSecret(t, cl, ns, "one")
	waitMirrored(t, cl, ns, "one", "a")
	// The first cache is gone: its requests stopped.
	n := first.Load()
	createSecret(t, cl, ns, "two")
	waitMirrored(t, cl, ns, "two", "a")
	require.Equal(t, n, first.Load(), "the first config's cache still sends requests")
	fs, _ := f.Cluster("a")
	require.Equal(t, cm.ClusterStateOnline, fs.State)
}
