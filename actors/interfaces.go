package actors

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
)

// Runnable is anything the manager shuts down when it stops. Shutdown should
// block until the component has terminated, and return early when ctx ends.
type Runnable interface {
	Shutdown(ctx context.Context)
}

// Controller is a Runnable that is started by Run and reports its health.
//
// Run starts the controller and returns nil once it is started (a furiko-style
// controller starts its workers and returns), or an error if it cannot start.
// The context passed to Run is a start context: it carries the start deadline,
// it is cancelled once Run has returned or the child is stopped, and it carries
// a failure reporter (see ReportFailure). Work that outlives Run must use a
// context of its own, ended by Shutdown.
//
// GetHealth reports the controller's health; its Name is the controller's name
// unless the controller also implements Namer.
type Controller interface {
	Runnable
	Run(ctx context.Context) error
	GetHealth() HealthStatus
}

// Store is recovered once the manager has been elected, before any controller
// runs. A Store that also implements Runnable is shut down with the rest.
type Store interface {
	Name() string
	Recover(ctx context.Context) error
}

// Webhook is an admission webhook. Start blocks until the webhook can serve;
// Ready says whether it can serve now; Handle answers one AdmissionRequest
// for the requests sent to Path.
type Webhook interface {
	Runnable
	Name() string
	Start(ctx context.Context) error
	Ready() bool
	Path() string
	Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)
}

// Namer is implemented by a Controller that knows its name without a health
// check. The manager uses Name when it is present, and GetHealth().Name
// otherwise.
type Namer interface {
	Name() string
}

// HealthStatus is the health of one controller.
type HealthStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Message string `json:"message,omitempty"`
}

// Kind names what a child hosts.
type Kind string

// The kinds of children, as they appear in events and status.
const (
	KindController Kind = "controller"
	KindStore      Kind = "store"
	KindWebhook    Kind = "webhook"
	// KindRunnable is a Runnable that is neither a Controller nor a Webhook:
	// it is not started, only shut down with the rest.
	KindRunnable Kind = "runnable"
	// KindGroup is a group of children with a strategy and a restart budget
	// of its own (controllermanager.NewGroup): it hosts no component itself.
	KindGroup Kind = "group"
	// KindCluster is a member cluster's group in a fleet
	// (controllermanager.NewFleet): a group, "<fleet>/<cluster>", whose
	// status also says where the cluster stands (supervisor.ClusterInfo).
	KindCluster Kind = "cluster"
)

// IsGroup reports whether a child of kind k holds children of its own: a
// group, or a fleet's member cluster.
func (k Kind) IsGroup() bool { return k == KindGroup || k == KindCluster }
