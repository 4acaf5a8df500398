package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// The labels of the example: a ConfigMap labelled MirrorLabel=true is
// mirrored into "<name>-mirror" in its namespace, labelled MirrorOfLabel=<name>
// and owned by it (so the garbage collector deletes the mirror with it).
const (
	MirrorLabel   = "mirror.actorkube.io/enabled"
	MirrorOfLabel = "mirror.actorkube.io/of"
	MirrorSuffix  = "-mirror"
)

// MirrorReconciler is a plain controller-runtime reconciler: nothing in it
// knows it runs under controllermanager.
type MirrorReconciler struct {
	Client client.Client
	Scheme *runtime.Scheme
	// Reconciled, when not nil, is called after each successful reconcile
	// (the tests and the figures time failovers with it).
	Reconciled func(types.NamespacedName)
}

// Reconcile makes req's mirror match it: same data, owned by it.
func (r *MirrorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var src corev1.ConfigMap
	if err := r.Client.Get(ctx, req.NamespacedName, &src); err != nil {
		// Deleted: its mirror goes with it, by its owner reference.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if src.Labels[MirrorLabel] != "true" {
		return ctrl.Result{}, nil
	}
	mirror := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: src.Name + MirrorSuffix}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, mirror, func() error {
		if mirror.Labels == nil {
			mirror.Labels = map[string]string{}
		}
		mirror.Labels[MirrorOfLabel] = src.Name
		mirror.Data = src.Data
		mirror.BinaryData = src.BinaryData
		return controllerutil.SetControllerReference(&src, mirror, r.Scheme)
	})
	if err != nil { // a conflict too: the retry reads the newer object
		return ctrl.Result{}, fmt.Errorf("mirroring %s: %w", req, err)
	}
	if r.Reconciled != nil {
		r.Reconciled(req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// sources is the predicate of the For: only labelled ConfigMaps are
// reconciled; their mirrors come back through Owns.
var sources = predicate.NewPredicateFuncs(func(o client.Object) bool {
	return o.GetLabels()[MirrorLabel] == "true"
})
