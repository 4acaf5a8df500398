package main

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// The member clusters' probes in a fleet run (--fleet-label): short, so that an
// outage is seen within a few seconds.
const (
	fleetProbePeriod      = 500 * time.Millisecond
	fleetProbeTimeout     = 400 * time.Millisecond
	fleetFailureThreshold = 2 * time.Second
	fleetSuccessThreshold = time.Second
)

// addFleet adds a fleet "fleet" (--fleet-label): its member clusters are the
// kubeconfig Secrets of namespace with the label selector, and each member's
// group holds one writer, "stamp-<cluster>", patching the ConfigMap
// default/stamp of that member every 100 ms through the Cluster's Config, whose
// writes pass the guard of the shard that runs the cluster. Every write is
// journalled with its outcome (journal.Write).
func addFleet(mgr *cm.ControllerManager, client kubernetes.Interface, namespace, selector, identity string, rec *journal.Writer) error {
	sel, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("--fleet-label %q: %w", selector, err)
	}
	build := func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{&writer{
			activity: activity{name: "stamp-" + c.Name(), rec: rec}, restConfig: c.Config(),
			namespace: "default", configMap: "stamp", identity: identity, guarded: false, every: 100 * time.Millisecond,
		}}
	}
	mgr.Add(cm.NewFleet("fleet", cm.KubeconfigSecrets(client, namespace, sel), build, cm.FleetSpec{
		ProbePeriod:      metav1.Duration{Duration: fleetProbePeriod},
		ProbeTimeout:     metav1.Duration{Duration: fleetProbeTimeout},
		FailureThreshold: metav1.Duration{Duration: fleetFailureThreshold},
		SuccessThreshold: metav1.Duration{Duration: fleetSuccessThreshold},
	}))
	return nil
}
