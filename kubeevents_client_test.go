package controllermanager_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	cm "github.com/actorkube/controllermanager"
)

// The manager's own Kubernetes Events go through the controllers'
// clientset (Context.Kubernetes()), not the one WithLeaderElectionClient
// gives the Lease: that clientset's rate limiter is the renewals' own, and
// a wave of ShardLost and ShardAcquired Events spent it while renewals
// waited past the renew deadline, each loss bringing more Events. Before,
// every Event was written through the election's clientset.
func TestEventsGoThroughTheControllersClientNotTheLeases(t *testing.T) {
	ctrlClient, leaseClient := fake.NewClientset(), fake.NewClientset()
	cron := &panicky{metricsController: metricsController{name: "cron"}}
	m := startMetricsManager(t, cm.NewContext(ctrlClient), observeSpec(), []cm.Controller{cron},
		cm.WithIdentity("replica-a"), cm.WithLeaderElectionClient(leaseClient))
	shutdown(t, m)
	count := func(c kubernetes.Interface) int {
		list, err := c.CoreV1().Events("jobs").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	if n := count(leaseClient); n != 0 {
		t.Errorf("%d Events written through the Lease's clientset, want none", n)
	}
	if n := count(ctrlClient); n == 0 {
		t.Error("no Event written through the controllers' clientset")
	}
	if _, err := leaseClient.CoordinationV1().Leases("jobs").Get(context.Background(), "jobs-operator", metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease is not on the election's clientset: %v", err)
	}
}
