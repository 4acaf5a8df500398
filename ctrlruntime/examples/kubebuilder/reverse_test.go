package kubebuilder_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	demov1 "github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/api/v1"
	"github.com/actorkube/controllermanager/ctrlruntime/examples/kubebuilder/internal/controller"
)

// The move is two-way: the project's SetupWithManager, written with
// ctrlruntime.NewControllerManagedBy, runs unchanged on controller-runtime's
// own manager (a test suite or a binary that keeps ctrl.NewManager), and
// its reconciler does its work there.
func TestSetupWithManagerRunsOnControllerRuntimesManager(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is empty: no kube-apiserver and etcd to run against")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = demov1.AddToScheme(scheme)

	// controller-runtime keeps the names of the controllers built in the
	// process: without SkipNameValidation a second run of this test (go
	// test -count=2) is refused "greeting" by the first's.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controller.GreetingReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr); err != nil {
		t.Fatalf("SetupWithManager on ctrl.NewManager's manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("Start did not return within a minute of its context's end")
		}
	})

	cl := mgr.GetAPIReader()
	writer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	greeting := &demov1.Greeting{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "both-ways"},
		Spec: demov1.GreetingSpec{Message: "hello", Copies: 2}}
	if err := writer.Create(context.Background(), greeting); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := range 2 {
			var cm corev1.ConfigMap
			if cl.Get(ctx, types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("both-ways-%d", i)}, &cm) != nil {
				return false, nil
			}
		}
		var got demov1.Greeting
		return cl.Get(ctx, client.ObjectKeyFromObject(greeting), &got) == nil && got.Status.ConfigMaps == 2, nil
	})
	if err != nil {
		t.Fatalf("the Greeting's two ConfigMaps and its status under controller-runtime's manager: %v", err)
	}
}
