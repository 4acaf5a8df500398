package lease

import (
	"fmt"
	"os"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// NewIdentity returns a holder identity unique to this process: the host name
// and a random UUID, as client-go's own components use.
func NewIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "_" + uuid.NewString()
}

// NewLeaseLock returns a resourcelock.LeaseLock on the Lease namespace/name,
// held under identity.
func NewLeaseLock(client kubernetes.Interface, namespace, name, identity string) (resourcelock.Interface, error) {
	return NewLeaseLockWithRecorder(client, namespace, name, identity, nil)
}

// NewLeaseLockWithRecorder is NewLeaseLock with an EventRecorder: client-go
// records a Normal "LeaderElection" Event on the Lease through it when this
// replica becomes leader ("<identity> became leader") and when it stops
// leading ("<identity> stopped leading"). A nil recorder records nothing.
func NewLeaseLockWithRecorder(client kubernetes.Interface, namespace, name, identity string, recorder resourcelock.EventRecorder) (resourcelock.Interface, error) {
	if client == nil {
		return nil, fmt.Errorf("lease: no Kubernetes clientset for the Lease %s/%s", namespace, name)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder},
	}, nil
}
