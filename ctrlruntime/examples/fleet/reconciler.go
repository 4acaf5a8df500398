package main

// This file is a reconciler as written for sigs.k8s.io/multicluster-runtime,
// moved by its imports: mcreconcile and mcbuilder name the one package
// ctrlruntime/fleet, and the manager field is a *fleet.Manager.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcbuilder "github.com/actorkube/controllermanager/ctrlruntime/fleet"
	mcmanager "github.com/actorkube/controllermanager/ctrlruntime/fleet"
	mcreconcile "github.com/actorkube/controllermanager/ctrlruntime/fleet"
)

// StampReconciler writes, for each ConfigMap of Namespace, a ConfigMap
// "<name>-stamp" into the same member cluster, naming that cluster.
type StampReconciler struct {
	Manager   *mcmanager.Manager
	Namespace string
}

func (r *StampReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	if req.Namespace != r.Namespace || len(req.Name) > 6 && req.Name[len(req.Name)-6:] == "-stamp" {
		return ctrl.Result{}, nil
	}
	cl, err := r.Manager.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return ctrl.Result{}, err
	}
	stamp := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name + "-stamp"},
		Data:       map[string]string{"cluster": req.ClusterName},
	}
	if err := cl.GetClient().Create(ctx, stamp); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler on every member cluster.
func (r *StampReconciler) SetupWithManager(mgr *mcmanager.Manager) error {
	return mcbuilder.ControllerManagedBy(mgr).Named("stamp").For(&corev1.ConfigMap{}).Complete(r)
}
