// Package controller holds the project's reconcilers.
package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/actorkube/controllermanager/ctrlruntime"
	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
)

// ownerKey indexes ConfigMaps by the name of the Greeting that controls
// them, so that a reconcile lists a Greeting's ConfigMaps from the cache.
const ownerKey = ".metadata.controller"

// GreetingReconciler reconciles a Greeting object: it keeps Spec.Copies
// ConfigMaps holding Spec.Message, owned by the Greeting, and counts them
// in Status.ConfigMaps.
type GreetingReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

// +kubebuilder:rbac:groups=demo.example.com,resources=greetings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=demo.example.com,resources=greetings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete

// Reconcile moves the Greeting's ConfigMaps towards its spec.
func (r *GreetingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	var greeting demov1.Greeting
	if err := r.Get(ctx, req.NamespacedName, &greeting); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var owned corev1.ConfigMapList
	if err := r.List(ctx, &owned, client.InNamespace(req.Namespace), client.MatchingFields{ownerKey: req.Name}); err != nil {
		log.Error(err, "unable to list the Greeting's ConfigMaps")
		return ctrl.Result{}, err
	}
	copies := greeting.Spec.Copies
	if copies <= 0 {
		copies = 1
	}
	for i := range copies {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: fmt.Sprintf("%s-%d", req.Name, i)},
			Data:       map[string]string{"message": greeting.Spec.Message},
		}
		if err := ctrl.SetControllerReference(&greeting, cm, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			log.Error(err, "unable to create a ConfigMap", "configMap", cm.Name)
			return ctrl.Result{}, err
		}
	}
	if greeting.Status.ConfigMaps != int32(len(owned.Items)) {
		greeting.Status.ConfigMaps = int32(len(owned.Items))
		if err := r.Status().Update(ctx, &greeting); err != nil {
			return ctrl.Result{}, err
		}
	}
	log.V(1).Info("reconciled", "configMaps", len(owned.Items))
	return ctrl.Result{}, nil
}

// SetupWithManager sets up the controller with the Manager.
func (r *GreetingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.ConfigMap{}, ownerKey, func(obj client.Object) []string {
		owner := metav1.GetControllerOf(obj)
		if owner == nil || owner.APIVersion != demov1.GroupVersion.String() || owner.Kind != "Greeting" {
			return nil
		}
		return []string{owner.Name}
	}); err != nil {
		return err
	}

	return ctrlruntime.NewControllerManagedBy(mgr).
		For(&demov1.Greeting{}).
		Owns(&corev1.ConfigMap{}).
		Named("greeting").
		Complete(r)
}
