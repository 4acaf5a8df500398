package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// A watch that stays open but delivers nothing (a connection dropped by a
// proxy without being closed) hid a deleted Secret for as long as it
// stayed open: forever. Each watch now ends after its TimeoutSeconds (5
// to 10 minutes, on the manager's clock should the server not end it),
// and the fresh list finds the Secret gone.
func TestFleetKubeconfigSecretsSilentWatchIsRelisted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a := newFakeMember(t, memberOK)
	client := fake.NewClientset(kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, kubeconfig(t, a.srv.URL, "token-1")))
	watches := make(chan *watch.FakeWatcher, 16)
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake() // open, and silent: nothing is ever sent on it
		watches <- w
		return true, w, nil
	})
	lists := make(chan struct{}, 16)
	client.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists <- struct{}{}
		return false, nil, nil
	})
	prov := cm.KubeconfigSecrets(client, "fleet", labels.SelectorFromSet(labels.Set{"fleet": "member"}))
	fleet := cm.NewFleet("fleet", prov, newBuilds().build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	awaitRecv(t, lists, "the provider's first list")
	first := recvWithin(t, watches, "the provider's first watch")

	require.NoError(t, client.CoreV1().Secrets("fleet").Delete(context.Background(), "a-kubeconfig", v1.DeleteOptions{}))
	require.Len(t, fleet.Clusters(), 1, "the silent watch says nothing of the deletion")

	// Past the longest TimeoutSeconds a watch is given: the provider
	// stops the watch, lists again and finds a-kubeconfig gone.
	clk.Step(10*time.Minute + time.Second)
	awaitRecv(t, lists, "a list after the watch's timeout")
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/a"))
	require.True(t, first.IsStopped(), "the timed-out watch is stopped")
	recvWithin(t, watches, "a new watch after the list")
}
