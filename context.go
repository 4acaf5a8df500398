package controllermanager

import (
	"context"

	"k8s.io/client-go/kubernetes"
)

// Context is what a manager takes from its host: furiko's controller
// context, reduced to what the runtime uses.
type Context interface {
	// Start starts shared dependencies (informer factories, config loaders);
	// the manager's Start calls it once, first, as the pre-flight.
	Start(ctx context.Context) error
	// Kubernetes is the clientset for the leader-election Lease; nil where
	// election is off.
	Kubernetes() kubernetes.Interface
}

// NewContext returns a Context with nothing to start, whose clientset is
// client (nil where election is off).
func NewContext(client kubernetes.Interface) Context {
	return staticContext{client: client}
}

type staticContext struct{ client kubernetes.Interface }

func (staticContext) Start(context.Context) error        { return nil }
func (c staticContext) Kubernetes() kubernetes.Interface { return c.client }
