package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
)

// StaticClusters is a ClusterProvider of a fixed set of member clusters:
// its Run engages each (in name order) and returns when ctx ends. A name
// the fleet refuses makes Run fail, naming every one refused, after
// engaging the others.
func StaticClusters(clusters map[string]*rest.Config) ClusterProvider {
	own := make(map[string]*rest.Config, len(clusters))
	for name, cfg := range clusters {
		if cfg != nil {
			cfg = rest.CopyConfig(cfg)
		}
		own[name] = cfg
	}
	return staticClusters(own)
}

type staticClusters map[string]*rest.Config

func (s staticClusters) Run(ctx context.Context, engage func(string, *rest.Config) error, _ func(string)) error {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if err := engage(name, s[name]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// The keys KubeconfigSecrets reads a kubeconfig from, in this order:
// Cluster API's and multicluster-runtime's.
const (
	KubeconfigSecretKey       = "value"
	KubeconfigSecretKeyLegacy = "kubeconfig"
)

// KubeconfigSecrets is a ClusterProvider of the kubeconfig Secrets in
// namespace of the manager's own cluster that selector matches, watched: a
// Secret added engages its cluster, one deleted (or no longer matching)
// disengages it, one whose kubeconfig changed engages it again (its subtree
// restarts once, on the new config). The cluster's name is the Secret's
// name less a "-kubeconfig" suffix (Cluster API's "<cluster>-kubeconfig").
// The kubeconfig is the Secret's "value" key, else its "kubeconfig" key;
// its current context is used.
//
// A Secret whose kubeconfig is missing or does not parse, or whose cluster
// another Secret names already (ErrDuplicateCluster), is reported with
// ReportClusterProblem (a ClusterEngaged event whose Err names the Secret
// and the problem, and the cluster's ClusterStatus.Problem) and disturbs
// nothing else: a cluster engaged from an earlier good version of the
// Secret stays engaged on it. When the Secret a cluster was engaged from
// goes while a duplicate remains, the duplicate takes over (its config
// engaged, as a rotation); when the last duplicate goes, the problem is
// over. A watch that ends is opened again from a
// fresh list; each watch ends after 5 to 10 minutes (its TimeoutSeconds,
// random as client-go's reflector's, on the manager's clock should the
// server not end it), so that one open but silent cannot hide a deleted
// Secret for longer. A list or watch that fails is the provider's failure
// (supervised: the runner restarts it with backoff). A nil client makes
// the fleet's Start fail, naming "<name>/provider".
func KubeconfigSecrets(client kubernetes.Interface, namespace string, selector labels.Selector) ClusterProvider {
	if selector == nil {
		selector = labels.Everything()
	}
	return &secretClusters{client: client, namespace: namespace, selector: selector}
}

// secretClusters is the ClusterProvider KubeconfigSecrets returns.
type secretClusters struct {
	client    kubernetes.Interface
	namespace string
	selector  labels.Selector
}

// ClusterNameForSecret is the member cluster a kubeconfig Secret names:
// its name less a "-kubeconfig" suffix.
func ClusterNameForSecret(secretName string) string {
	return strings.TrimSuffix(secretName, "-kubeconfig")
}

// Run lists and watches the Secrets until ctx ends.
func (p *secretClusters) Run(ctx context.Context, engage func(string, *rest.Config) error, disengage func(string)) error {
	if p.client == nil {
		return errors.New("KubeconfigSecrets: nil client")
	}
	// owner maps a cluster to the Secret it was engaged from, and engaged
	// to the config engaged from it; a second Secret for the same cluster
	// is a duplicate, kept in dups (the last version seen) to take over
	// should the owner go.
	owner := map[string]string{}
	engaged := map[string]*rest.Config{}
	dups := map[string]map[string]*corev1.Secret{}
	seen := map[string]string{} // Secret → the resourceVersion last handled
	handle := func(s *corev1.Secret) {
		if rv, ok := seen[s.Name]; ok && rv != "" && rv == s.ResourceVersion {
			return // a relist of what was handled; an equal config would be a no-op anyway
		}
		seen[s.Name] = s.ResourceVersion
		cluster := ClusterNameForSecret(s.Name)
		if o, ok := owner[cluster]; ok && o != s.Name {
			if dups[cluster] == nil {
				dups[cluster] = map[string]*corev1.Secret{}
			}
			dups[cluster][s.Name] = s.DeepCopy()
			ReportClusterProblem(ctx, cluster, fmt.Errorf("secret %s/%s: %w: cluster %q is engaged from secret %q", s.Namespace, s.Name, ErrDuplicateCluster, cluster, o))
			return
		}
		cfg, err := kubeconfigOf(s)
		if err == nil {
			err = engage(cluster, cfg)
		}
		if err != nil {
			ReportClusterProblem(ctx, cluster, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err))
			return
		}
		owner[cluster], engaged[cluster] = s.Name, cfg
	}
	gone := func(name string) {
		delete(seen, name)
		cluster := ClusterNameForSecret(name)
		switch o, ok := owner[cluster]; {
		case o == name:
			// The owner went: a duplicate still there takes over (in name
			// order), its config engaged as a rotation would be; with none
			// that engages, the cluster is disengaged.
			delete(owner, cluster)
			delete(engaged, cluster)
			for _, d := range slices.Sorted(maps.Keys(dups[cluster])) {
				s := dups[cluster][d]
				delete(dups[cluster], d)
				delete(seen, d)
				if handle(s); owner[cluster] != "" {
					break
				}
			}
			if len(dups[cluster]) == 0 {
				delete(dups, cluster)
			}
			if owner[cluster] == "" {
				disengage(cluster)
			}
		case ok:
			// A duplicate went; the owner stays. With the last one gone the
			// problem it was is over: an engage of the config engaged
			// clears it, changing nothing else.
			delete(dups[cluster], name)
			if len(dups[cluster]) == 0 {
				delete(dups, cluster)
				_ = engage(cluster, engaged[cluster])
			}
		default: // known to the fleet only by the problem reported
			disengage(cluster)
		}
	}
	secrets := p.client.CoreV1().Secrets(p.namespace)
	opts := metav1.ListOptions{LabelSelector: p.selector.String()}
	clk := providerClock(ctx)
	for ctx.Err() == nil {
		list, err := secrets.List(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("KubeconfigSecrets: list secrets in %q: %w", p.namespace, err)
		}
		listed := map[string]bool{}
		for i := range list.Items {
			listed[list.Items[i].Name] = true
			handle(&list.Items[i])
		}
		for name := range seen {
			if !listed[name] {
				gone(name)
			}
		}
		// The timer is set before the watch is opened, so that it runs
		// from before the watch can miss anything.
		timeout := secretWatchTimeout()
		expired := clk.NewTimer(timeout)
		secs := int64(timeout / time.Second)
		w, err := secrets.Watch(ctx, metav1.ListOptions{LabelSelector: p.selector.String(), ResourceVersion: list.ResourceVersion, TimeoutSeconds: &secs})
		if err != nil {
			expired.Stop()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("KubeconfigSecrets: watch secrets in %q: %w", p.namespace, err)
		}
		p.watch(ctx, w, expired.C(), handle, gone)
		expired.Stop()
	}
	return nil
}

// minSecretWatchTimeout is the least time a watch of the Secrets stays
// open before they are listed again; client-go's reflector's minWatchTimeout.
const minSecretWatchTimeout = 5 * time.Minute

// secretWatchTimeout is one watch's TimeoutSeconds: random in [5m, 10m),
// as client-go's reflector picks it, so that the replicas' relists spread
// out. A watch that is open but silent (a connection a proxy or load
// balancer dropped without closing it) misses every change, a deleted
// Secret included; its end brings a fresh list, which does not.
func secretWatchTimeout() time.Duration {
	return (minSecretWatchTimeout + rand.N(minSecretWatchTimeout)).Truncate(time.Second)
}

// providerClock is the clock of the fleet whose provider's Run received
// ctx (the manager's, WithClock), else the real one.
func providerClock(ctx context.Context) clock.Clock {
	if f, _ := ctx.Value(problemKey{}).(*Fleet); f != nil {
		return f.clock()
	}
	return clock.RealClock{}
}

// watch handles w's events until it ends, expired fires (the watch's
// TimeoutSeconds, should the server not end it) or ctx ends.
func (p *secretClusters) watch(ctx context.Context, w watch.Interface, expired <-chan time.Time, handle func(*corev1.Secret), gone func(string)) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expired:
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			s, isSecret := ev.Object.(*corev1.Secret)
			if !isSecret {
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				handle(s)
			case watch.Deleted:
				gone(s.Name)
			}
		}
	}
}

// kubeconfigOf parses s's kubeconfig.
func kubeconfigOf(s *corev1.Secret) (*rest.Config, error) {
	data, ok := s.Data[KubeconfigSecretKey]
	if !ok {
		data, ok = s.Data[KubeconfigSecretKeyLegacy]
	}
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("no kubeconfig: neither key %q nor %q", KubeconfigSecretKey, KubeconfigSecretKeyLegacy)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig does not parse: %w", err)
	}
	return cfg, nil
}
