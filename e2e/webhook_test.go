package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorkube/controllermanager/e2e/internal/journal"
)

// webhookName is the webhook's name in the ValidatingWebhookConfiguration; the API
// server quotes it in its errors.
const webhookName = "configmap-policy.e2e.actorkube.io"

// TestWebhookAdmission points a ValidatingWebhookConfiguration, its caBundle from a CA
// of the test's own, at the replica's TLS webhook server on 127.0.0.1, as the API server
// calls webhooks by URL. A ConfigMap created through client-go reaches Handle; a denial
// blocks the create with the webhook's message; a Handle that panics fails the webhook,
// its supervisor restarts it, and it answers again (with failurePolicy Fail, a create
// sent while it restarts is rejected, so the test retries with a deadline).
func TestWebhookAdmission(t *testing.T) {
	s := newScenario(t)
	pki := newServingPKI(t, s.dir)
	r := s.start("replica-a", "--webhook-addr=127.0.0.1:0", "--webhook-cert="+pki.certFile, "--webhook-key="+pki.keyFile)
	all := waitFor(t, "the webhook server listening", startupTimeout, []*replica{r}, func(all [][]journal.Entry) bool {
		return slices.ContainsFunc(all[0], func(e journal.Entry) bool { return e.Kind == journal.WebhookServing })
	})
	serving := all[0][slices.IndexFunc(all[0], func(e journal.Entry) bool { return e.Kind == journal.WebhookServing })]
	waitLeader(t, "the replica leading", startupTimeout, []*replica{r})

	client := s.cluster.Clientset()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := "https://" + serving.Addr + "/validate"
	fail, none, scope, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone,
		admissionregistrationv1.NamespacedScope, int32(5)
	_, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.namespace},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         webhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: pki.caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: &scope,
				},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.namespace}},
			FailurePolicy:     &fail,
			SideEffects:       &none,
			TimeoutSeconds:    &timeout,
			// v1beta1 too, as real configurations list it; the API server sends v1.
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	configMaps := client.CoreV1().ConfigMaps(s.namespace)
	create := func(name string, annotations map[string]string) error {
		_, err := configMaps.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Data:       map[string]string{"k": "v"},
		}, metav1.CreateOptions{})
		return err
	}
	admitted := func(name string) journal.Entry {
		t.Helper()
		all := waitFor(t, name+" reaching Handle", 10*time.Second, []*replica{r}, func(all [][]journal.Entry) bool {
			return slices.ContainsFunc(all[0], func(e journal.Entry) bool { return e.Kind == journal.Admission && e.Name == name })
		})
		return all[0][slices.IndexFunc(all[0], func(e journal.Entry) bool { return e.Kind == journal.Admission && e.Name == name })]
	}

	// The API server picks a new configuration up within a second or so: until a probe
	// is denied, creates are not sent to the webhook.
	configured := time.Now()
	for i := 0; ; i++ {
		err := create(fmt.Sprintf("probe-%d", i), map[string]string{journal.DenyAnnotation: "probe"})
		if err != nil && strings.Contains(err.Error(), "denied by configmap-policy") {
			break
		}
		require.True(t, err == nil, "probe %d: unexpected error: %v", i, err)
		require.Less(t, time.Since(configured), 30*time.Second, "the API server never called the webhook")
		<-time.After(pollInterval) // polling the API server, with the deadline above
	}
	figure(t, "webhook: configuration created → first call", time.Since(configured), "")

	// An allowed object reaches Handle and is stored.
	require.NoError(t, create("allowed", nil))
	e := admitted("allowed")
	require.True(t, e.Allowed)
	require.Equal(t, "CREATE", e.Operation)
	require.Equal(t, s.namespace, e.Namespace)
	_, err = configMaps.Get(ctx, "allowed", metav1.GetOptions{})
	require.NoError(t, err)

	// A denial blocks the create with the webhook's message.
	err = create("denied", map[string]string{journal.DenyAnnotation: "no thanks"})
	require.Error(t, err)
	want := "denied by configmap-policy on replica-a: no thanks"
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, webhookName)
	require.True(t, apierrors.IsForbidden(err), "want 403 Forbidden (the webhook's status code), have %v", err)
	e = admitted("denied")
	require.False(t, e.Allowed)
	require.Equal(t, want, e.Message)
	_, err = configMaps.Get(ctx, "denied", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the denied ConfigMap was stored: %v", err)

	// A panic in Handle denies that request and fails the webhook at once.
	panicked := time.Now()
	err = create("panic", map[string]string{journal.PanicAnnotation: "yes"})
	require.Error(t, err)
	require.ErrorContains(t, err, "panic")
	_, err = configMaps.Get(ctx, "panic", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the ConfigMap whose admission panicked was stored: %v", err)
	// It answers again. A create sent at once, while the webhook restarts, is answered
	// 503 with Retry-After: 1; the API server's client honours that and calls again a
	// second later (within timeoutSeconds), and applies failurePolicy Fail only when it
	// gives up: so retry, with a deadline, until a create is admitted.
	var rejected int
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("after-restart-%d", i)
		sent := time.Now()
		err := create(name, nil)
		if i == 0 {
			figure(t, "webhook: create sent during the restart → answered", time.Since(sent), "")
		}
		if err == nil {
			admitted(name)
			break
		}
		if rejected++; rejected == 1 {
			t.Logf("rejected while the webhook restarts: %v", err)
		}
		require.True(t, strings.Contains(err.Error(), webhookName), "create %d: unexpected error: %v", i, err)
		require.True(t, time.Now().Before(deadline), "the webhook did not answer again within 15s: %v", err)
		<-time.After(5 * time.Millisecond) // polling the API server, with the deadline above
	}
	figure(t, "webhook: panic → next create admitted", time.Since(panicked), fmt.Sprintf("(%d rejected meanwhile)", rejected))
	waitFor(t, "the webhook restarted by its supervisor", 10*time.Second, []*replica{r}, func(all [][]journal.Entry) bool {
		failed := slices.IndexFunc(all[0], func(e journal.Entry) bool {
			return e.Kind == journal.Supervision && e.Type == "ChildFailed" && e.Child == "configmap-policy"
		})
		return failed >= 0 && slices.ContainsFunc(all[0][failed:], func(e journal.Entry) bool {
			return e.Kind == journal.Supervision && e.Type == "ChildRestarted" && e.Child == "configmap-policy"
		})
	})

	for i := range 3 {
		require.NoError(t, create(fmt.Sprintf("later-%d", i), nil))
	}

	// The webhook was restarted, not the process or the controllers.
	entries := r.entries(t)
	require.Equal(t, 1, countKind(entries, journal.Begin))
	require.Equal(t, 2, countKind(entries, journal.WebhookStarted), "the webhook started once and restarted once")
	require.Equal(t, len(controllers), countKind(entries, journal.Running), "a controller was restarted")

	s.stopAll()
}

func countKind(entries []journal.Entry, kind journal.Kind) int {
	n := 0
	for _, e := range entries {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
