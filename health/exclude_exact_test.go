package health_test

import (
	"net/http"
	"testing"

	"github.com/actorkube/controllermanager/actors"
	"github.com/actorkube/controllermanager/health"
)

// ?exclude= names a check exactly, as k8s.io/apiserver's healthz does
// (its getExcludedChecks takes the query's values as they are): a
// controller whose name ends in a space (a name the manager accepts) can
// be excluded, by that name, and the name without the space excludes
// nothing. Found by a read: the handler trimmed the exclusions, so
// "controller/jobs " could not be excluded at all.
func TestExcludeMatchesNamesExactly(t *testing.T) {
	src := &source{health: func() []actors.HealthStatus {
		return []actors.HealthStatus{{Name: "jobs ", Message: "informer not synced"}, {Name: "cron", Healthy: true}}
	}}
	srv := serve(t, health.NewHandler(src))

	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/healthz?verbose&exclude=controller/jobs%20", http.StatusOK,
			lines("[+]controller/jobs  excluded: ok", "[+]controller/cron ok", "healthz check passed")},
		{"/healthz?verbose&exclude=controller/jobs", http.StatusInternalServerError,
			lines("[-]controller/jobs  failed: informer not synced", "[+]controller/cron ok",
				`warn: some health checks cannot be excluded: no matches for "controller/jobs"`, "healthz check failed")},
		{"/healthz?verbose&exclude=%20controller/cron", http.StatusInternalServerError,
			lines("[-]controller/jobs  failed: informer not synced", "[+]controller/cron ok",
				`warn: some health checks cannot be excluded: no matches for " controller/cron"`, "healthz check failed")},
	}
	for _, tt := range tests {
		r := get(t, srv, tt.path)
		if r.code != tt.wantCode || r.body != tt.wantBody {
			t.Errorf("GET %s: %d\n%s\nwant %d\n%s", tt.path, r.code, r.body, tt.wantCode, tt.wantBody)
		}
	}
}
