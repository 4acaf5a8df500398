package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
)

// fencedController builds its whole clientset on a config wrapped with
// GuardTransport, in Run, from the lease guard of the incarnation: every
// write it makes through it is refused, unsent, once this replica cannot
// prove it holds the lease.
type fencedController struct {
	base   *rest.Config
	client kubernetes.Interface
}

func (c *fencedController) Run(ctx context.Context) error {
	guard, _ := cm.LeaseGuard(ctx)
	cfg := rest.CopyConfig(c.base)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(guard, rt) })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c.client = client
	return nil // start workers on c.client here
}

// ExampleGuardTransport fences a clientset: here with a guard that fails,
// as it does once this replica cannot prove it holds the lease. The read
// reaches the API server; the write is refused before it is sent.
func ExampleGuardTransport() {
	apiServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("API server:", r.Method)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"state"}}`)
	}))
	defer apiServer.Close()

	notHeld := func() error { return &lease.NotHeldError{Reason: "the lease may have expired"} }
	cfg := &rest.Config{Host: apiServer.URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cm.GuardTransport(notHeld, rt) })
	client := kubernetes.NewForConfigOrDie(cfg)

	ctx := context.Background()
	_, err := client.CoreV1().ConfigMaps("default").Get(ctx, "state", metav1.GetOptions{})
	fmt.Println("get:", err)
	_, err = client.CoreV1().ConfigMaps("default").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}}, metav1.UpdateOptions{})
	fmt.Println("update refused:", errors.Is(err, lease.ErrNotHeld))
	// Output:
	// API server: GET
	// get: <nil>
	// update refused: true
}

// ExampleLeaseGuard shows a controller's Run taking its lease guard and
// fencing its clientset with it (see fencedController).
func ExampleLeaseGuard() {
	c := &fencedController{base: &rest.Config{Host: "https://127.0.0.1:6443"}}
	_ = c.Run(context.Background()) // outside a manager: its guard refuses every write
	_, err := c.client.CoreV1().ConfigMaps("default").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}}, metav1.CreateOptions{})
	fmt.Println(errors.Is(err, lease.ErrNotHeld))
	// Output:
	// true
}
