package cluster

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProxyClassifiesLeaseRequests(t *testing.T) {
	for _, c := range []struct {
		method, target string
		write          bool
		verb           string // "" when not a Lease request
	}{
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l-3", true, "UPDATE"},
		{http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/ns/leases", true, "CREATE"},
		{http.MethodPatch, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", true, "PATCH"},
		{http.MethodDelete, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", true, "DELETE"},
		{http.MethodDelete, "/apis/coordination.k8s.io/v1/namespaces/ns/leases", true, "DELETECOLLECTION"},
		{http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", false, "GET"},
		{http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns/leases?labelSelector=x", false, "LIST"},
		{http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns/leases?watch=true&resourceVersion=5", false, "WATCH"},
		{http.MethodGet, "/apis/coordination.k8s.io/v1/leases", false, "LIST"},
		{http.MethodPut, "/api/v1/namespaces/ns/configmaps/leases", false, ""},
		{http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/ns/leasecandidates", false, ""},
		{http.MethodGet, "/apis/coordination.k8s.io/v1", false, ""},
	} {
		req := httptest.NewRequest(c.method, c.target, nil)
		assert.Equal(t, c.write, IsLeaseWrite(req), "%s %s: a Lease write", c.method, c.target)
		assert.Equal(t, c.verb != "", isLeasePath(req.URL.Path), "%s %s: a Lease request", c.method, c.target)
		if c.verb != "" {
			assert.Equal(t, c.verb, leaseVerb(req), "%s %s", c.method, c.target)
		}
	}
}
