package controllermanager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// kubeconfig is a kubeconfig for server with token.
func kubeconfig(t *testing.T, server, token string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["member"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["fleet"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "fleet"}
	cfg.CurrentContext = "member"
	data, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return data
}

func kubeconfigSecret(name, key string, data []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet", Labels: map[string]string{"fleet": "member"}},
		Data:       map[string][]byte{key: data},
	}
}

func TestKubeconfigSecretsEngageRotateBreakAndDisengage(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	client := fake.NewClientset(
		kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, kubeconfig(t, a.srv.URL, "token-1")),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: "fleet"}},
	)
	watching := make(chan struct{}, 16)
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		watching <- struct{}{}
		return false, nil, nil
	})
	prov := cm.KubeconfigSecrets(client, "fleet", labels.SelectorFromSet(labels.Set{"fleet": "member"}))
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", prov, bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	awaitRecv(t, watching, "the provider's watch")
	require.Len(t, fleet.Clusters(), 1, "the unlabelled Secret is not a member")
	secrets := client.CoreV1().Secrets("fleet")
	ctx := context.Background()

	// Added at run time, under the legacy key.
	_, err := secrets.Create(ctx, kubeconfigSecret("b", cm.KubeconfigSecretKeyLegacy, kubeconfig(t, b.srv.URL, "token-1")), metav1.CreateOptions{})
	require.NoError(t, err)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))

	// A second Secret for cluster b: refused, nothing disturbed.
	_, err = secrets.Create(ctx, kubeconfigSecret("b-kubeconfig", cm.KubeconfigSecretKey, kubeconfig(t, a.srv.URL, "token-9")), metav1.CreateOptions{})
	require.NoError(t, err)
	dup := log.waitFor(t, nil, 0, func(e cm.Event) bool { return e.Type == cm.ClusterEngaged && e.Child == "fleet/b" && e.Err != nil })
	require.ErrorIs(t, dup.Err, cm.ErrDuplicateCluster)
	st, _ := fleet.Cluster("b")
	require.ErrorIs(t, st.Problem, cm.ErrDuplicateCluster)
	require.Equal(t, cm.ClusterStateOnline, st.State)

	// Rotated: a's subtree restarts once, on the new config. (client-go
	// drops a kubeconfig's credentials over plain HTTP, so the server's
	// address is what changes here: the same server, by another name.)
	rotated := strings.Replace(a.srv.URL, "127.0.0.1", "localhost", 1)
	_, err = secrets.Update(ctx, kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, kubeconfig(t, rotated, "token-2")), metav1.UpdateOptions{})
	require.NoError(t, err)
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/a"))
	ctrls := bl.of("a")
	require.Len(t, ctrls, 2)
	require.Equal(t, rotated, ctrls[1].cluster.Config().Host)
	require.Equal(t, int32(1), ctrls[0].stops.Load())

	// Broken: an event and a's status say so; a runs on, on token-2.
	_, err = secrets.Update(ctx, kubeconfigSecret("a-kubeconfig", cm.KubeconfigSecretKey, []byte("{not: [a kubeconfig")), metav1.UpdateOptions{})
	require.NoError(t, err)
	bad := log.waitFor(t, nil, 0, func(e cm.Event) bool {
		return e.Type == cm.ClusterEngaged && e.Child == "fleet/a" && e.Err != nil
	})
	require.ErrorContains(t, bad.Err, "fleet/a-kubeconfig")
	require.ErrorContains(t, bad.Err, "does not parse")
	st, _ = fleet.Cluster("a")
	require.ErrorContains(t, st.Problem, "does not parse")
	require.Equal(t, cm.ClusterStateOnline, st.State)
	require.Len(t, bl.of("a"), 2, "nothing restarted")
	require.Zero(t, bl.of("b")[0].stops.Load(), "b undisturbed")

	// A Secret that never parsed is listed Failed, and goes with its Secret.
	_, err = secrets.Create(ctx, kubeconfigSecret("c-kubeconfig", cm.KubeconfigSecretKey, []byte("garbage")), metav1.CreateOptions{})
	require.NoError(t, err)
	log.waitFor(t, nil, 0, func(e cm.Event) bool { return e.Type == cm.ClusterEngaged && e.Child == "fleet/c" && e.Err != nil })
	st, _ = fleet.Cluster("c")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	require.NoError(t, secrets.Delete(ctx, "c-kubeconfig", metav1.DeleteOptions{}))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/c"))

	// The owner deleted: the duplicate takes over, as a rotation (b's
	// subtree restarts once, on its config), and the problem is over.
	// (Before, b was disengaged with a valid Secret still there.)
	require.NoError(t, secrets.Delete(ctx, "b", metav1.DeleteOptions{}))
	log.waitForNth(t, 2, is(cm.ClusterOnline, "fleet/b"))
	require.Len(t, bl.of("b"), 2)
	require.Equal(t, a.srv.URL, bl.of("b")[1].cluster.Config().Host, "engaged from b-kubeconfig")
	require.Equal(t, int32(1), bl.of("b")[0].stops.Load())
	st, _ = fleet.Cluster("b")
	require.NoError(t, st.Problem)
	require.Zero(t, log.count(is(cm.ClusterDisengaged, "fleet/b")))

	// Deleted, the last: b is disengaged, a undisturbed.
	require.NoError(t, secrets.Delete(ctx, "b-kubeconfig", metav1.DeleteOptions{}))
	log.waitFor(t, nil, 0, is(cm.ClusterDisengaged, "fleet/b"))
	_, ok := fleetChild(t, mgr, "fleet/b")
	require.False(t, ok)
	require.Equal(t, int32(1), bl.of("b")[1].stops.Load())
	require.Len(t, bl.of("a"), 2)
}

// A duplicate Secret deleted while its cluster's owner stays: the problem
// it was is over, and nothing restarts. Before, ErrDuplicateCluster stayed
// in ClusterStatus.Problem for good.
func TestKubeconfigSecretsDuplicateGoneClearsTheProblem(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	b := newFakeMember(t, memberOK)
	client := fake.NewClientset(kubeconfigSecret("b", cm.KubeconfigSecretKey, kubeconfig(t, b.srv.URL, "token-1")))
	watching := make(chan struct{}, 16)
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		watching <- struct{}{}
		return false, nil, nil
	})
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", cm.KubeconfigSecrets(client, "fleet", labels.SelectorFromSet(labels.Set{"fleet": "member"})), bl.build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	awaitRecv(t, watching, "the provider's watch")
	secrets, ctx := client.CoreV1().Secrets("fleet"), context.Background()

	_, err := secrets.Create(ctx, kubeconfigSecret("b-kubeconfig", cm.KubeconfigSecretKey, kubeconfig(t, b.srv.URL, "token-2")), metav1.CreateOptions{})
	require.NoError(t, err)
	log.waitFor(t, nil, 0, func(e cm.Event) bool { return e.Type == cm.ClusterEngaged && e.Child == "fleet/b" && e.Err != nil })
	require.NoError(t, secrets.Delete(ctx, "b-kubeconfig", metav1.DeleteOptions{}))
	log.waitUntil(t, nil, 0, func() bool {
		st, _ := fleet.Cluster("b")
		return st.Problem == nil
	})
	st, _ := fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateOnline, st.State)
	require.Len(t, bl.of("b"), 1, "nothing restarted")
	require.Zero(t, bl.of("b")[0].stops.Load())
}

func TestStaticClustersEngagesEveryCluster(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	a, b := newFakeMember(t, memberOK), newFakeMember(t, memberOK)
	bl := newBuilds()
	fleet := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"a": a.config(), "b": b.config()}), bl.build, cm.FleetSpec{})
	mgr, log := fleetManager(t, clk, fleet)
	startFleet(t, mgr)
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/a"))
	log.waitFor(t, nil, 0, is(cm.ClusterOnline, "fleet/b"))
	var _ runtime.Object = &corev1.Secret{}
}
