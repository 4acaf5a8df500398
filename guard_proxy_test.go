package controllermanager_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
)

// Issue 34 §5: through a proxy subresource the API server forwards any
// method to the workload, so GuardTransport fences every method but the
// reads (GET, HEAD, OPTIONS) as a write. Before, only POST, PUT, PATCH and
// DELETE were: a MKCOL, PURGE or LOCK to pods/NAME/proxy, services/NAME/proxy
// or nodes/NAME/proxy went out from a replica that had lost its lease.
func TestGuardTransportFencesEveryWriteThroughAProxy(t *testing.T) {
	srv, reached := countingServer(t)
	notHeld := errors.New("not held, for this test")
	proxies := []string{
		"/api/v1/namespaces/ns/pods/p/proxy/admin",
		"/api/v1/namespaces/ns/pods/https:p:8443/proxy/",
		"/api/v1/namespaces/ns/services/s:80/proxy/queue",
		"/api/v1/nodes/n/proxy/run/ns/p/c",
		"/k8s/clusters/c-1/api/v1/namespaces/ns/pods/p/proxy/x", // behind a path prefix
	}
	for _, path := range proxies {
		for _, tt := range []struct {
			method  string
			refused bool
		}{
			{http.MethodGet, false},
			{http.MethodHead, false},
			{http.MethodOptions, false},
			{http.MethodPost, true},
			{http.MethodPut, true},
			{http.MethodPatch, true},
			{http.MethodDelete, true},
			{"MKCOL", true},
			{"PURGE", true},
			{"LOCK", true},
			{http.MethodTrace, true},
		} {
			t.Run(tt.method+" "+path, func(t *testing.T) {
				before := reached.Load()
				req, err := http.NewRequest(tt.method, srv.URL+path, nil)
				require.NoError(t, err)
				resp, err := (&http.Client{Transport: cm.GuardTransport(func() error { return notHeld }, nil)}).Do(req)
				if !tt.refused {
					require.NoError(t, err, "a read passes, through a proxy too")
					_ = resp.Body.Close()
					assert.Equal(t, before+1, reached.Load(), "sent")
					return
				}
				require.ErrorIs(t, err, notHeld)
				assert.Contains(t, err.Error(), tt.method+" "+path+" refused by the lease guard")
				assert.Equal(t, before, reached.Load(), "never sent")
			})
		}
	}
}
