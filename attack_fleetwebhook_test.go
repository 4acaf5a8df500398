package controllermanager_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	cm "github.com/actorkube/controllermanager"
)

// memberWebhook is a fleet member's webhook; its answers name its cluster.
type memberWebhook struct{ cluster, path string }

func (w *memberWebhook) Name() string                { return "wh" }
func (w *memberWebhook) Path() string                { return w.path }
func (w *memberWebhook) Start(context.Context) error { return nil }
func (w *memberWebhook) Shutdown(context.Context)    {}
func (w *memberWebhook) Ready() bool                 { return true }
func (w *memberWebhook) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: "wh", Healthy: true}
}
func (w *memberWebhook) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Result: &metav1.Status{Message: w.cluster}}, nil
}

// answeredBy posts a review to url and returns the HTTP status and the
// cluster whose webhook answered ("" when none did).
func answeredBy(t *testing.T, url string) (int, string) {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: types.UID("u1"), Operation: admissionv1.Create},
	})
	require.NoError(t, err)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r admissionv1.AdmissionReview
	if resp.StatusCode == http.StatusOK && json.Unmarshal(data, &r) == nil && r.Response != nil && r.Response.Result != nil {
		return resp.StatusCode, r.Response.Result.Message
	}
	return resp.StatusCode, ""
}

// memberWebhookFleet starts a manager serving its webhooks whose one child
// is a fleet of members "a" and "b", each built with one webhook at
// path(cluster).
func memberWebhookFleet(t *testing.T, path func(cluster string) string) (*clocktesting.FakeClock, *handProvider, map[string]*fakeMember, *cm.Fleet, *eventLog, string) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	members := map[string]*fakeMember{"a": newFakeMember(t, memberOK), "b": newFakeMember(t, memberOK)}
	prov := newHandProvider(map[string]*rest.Config{"a": members["a"].config()})
	build := func(c cm.Cluster) []cm.Runnable {
		return []cm.Runnable{&memberWebhook{cluster: c.Name(), path: path(c.Name())}}
	}
	fleet := cm.NewFleet("fleet", prov, build, fleetSpec())
	mgr, log := fleetManager(t, clk, fleet)
	srv := httptest.NewServer(mgr.Handler())
	t.Cleanup(srv.Close)
	startFleet(t, mgr)
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/a"))
	return clk, prov, members, fleet, log, srv.URL
}

// Members whose webhooks each have a path of their own are served each at
// its own path, and a member's path goes with the member; a member
// rotated to a new config keeps its path (its new group replaces the old
// one's webhook, it does not collide with it).
func TestFleetMemberWebhooksServedAtTheirOwnPaths(t *testing.T) {
	clk, prov, members, fleet, log, url := memberWebhookFleet(t, func(c string) string { return "/validate-" + c })
	require.NoError(t, prov.Engage(t, "b", members["b"].config()))
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/b"))
	for _, c := range []string{"a", "b"} {
		code, by := answeredBy(t, url+"/validate-"+c)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, c, by)
	}

	rotated := members["a"].config()
	rotated.BearerToken = "token-2"
	require.NoError(t, prov.Engage(t, "a", rotated))
	log.waitForNthStepping(t, clk, 2, is(cm.ClusterOnline, "fleet/a"))
	st, _ := fleet.Cluster("a")
	require.Equal(t, cm.ClusterStateOnline, st.State, "rotated: %v", st.Err)
	code, by := answeredBy(t, url+"/validate-a")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "a", by)

	prov.Disengage(t, "a")
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterDisengaged, "fleet/a"))
	code, _ = answeredBy(t, url+"/validate-a")
	require.Equal(t, http.StatusNotFound, code)
	code, by = answeredBy(t, url+"/validate-b")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "b", by)
}

// A member whose webhook has the path another member's webhook serves is
// not engaged: it is Failed, with an error wrapping ErrDuplicatePath
// naming both. Before, it ran, and the requests its cluster's API server
// sent to that path were answered by the other member's webhook, for the
// other cluster, until that member went, and then by its own.
func TestFleetMemberWebhookAtATakenPathFailsTheMember(t *testing.T) {
	clk, prov, members, fleet, log, url := memberWebhookFleet(t, func(string) string { return "/validate" })
	require.NoError(t, prov.Engage(t, "b", members["b"].config()))
	off := log.waitFor(t, clk, fleetPeriod, is(cm.ClusterOffline, "fleet/b"))
	require.ErrorIs(t, off.Err, cm.ErrDuplicatePath)
	require.ErrorContains(t, off.Err, `"fleet/a/wh" and "fleet/b/wh" at "/validate"`)
	st, _ := fleet.Cluster("b")
	require.Equal(t, cm.ClusterStateFailed, st.State)
	require.Zero(t, log.count(is(cm.ChildStarted, "fleet/b/wh")), "b's webhook ran")
	code, by := answeredBy(t, url+"/validate")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "a", by)

	// Once a has gone, b disengaged and engaged again takes the path (an
	// engage of the config it has already changes nothing, as for any
	// Failed member).
	prov.Disengage(t, "a")
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterDisengaged, "fleet/a"))
	prov.Disengage(t, "b")
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterDisengaged, "fleet/b"))
	require.NoError(t, prov.Engage(t, "b", members["b"].config()))
	log.waitForNthStepping(t, clk, 1, is(cm.ClusterOnline, "fleet/b"))
	code, by = answeredBy(t, url+"/validate")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "b", by)
}
