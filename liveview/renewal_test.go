package liveview_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/actorkube/controllermanager/health"
	"github.com/actorkube/controllermanager/liveview"
)

// checkedSource is a viewSource that is also a health.CheckProvider.
type checkedSource struct {
	*viewSource
	checks []health.Checker
}

func (s checkedSource) HealthzChecks() []health.Checker { return s.checks }

var _ health.CheckProvider = checkedSource{}

// TestRenewalFromTheLeaseWatchdog: the page's lease renewal is the outcome of
// the source's "leaderElection" check (health.CheckProvider), which this
// package finds without importing health; other checks, nil ones and
// sources without checks leave it empty.
func TestRenewalFromTheLeaseWatchdog(t *testing.T) {
	ok := func(*http.Request) error { return nil }
	overdue := func(*http.Request) error { return errors.New("renewal overdue by 3s") }
	tests := []struct {
		name string
		src  liveview.Source
		want string
	}{
		{"no CheckProvider", newViewSource(t), ""},
		{"no checks", checkedSource{viewSource: newViewSource(t)}, ""},
		{"another check", checkedSource{newViewSource(t), []health.Checker{health.Check("other", overdue)}}, ""},
		{"watchdog passes", checkedSource{newViewSource(t), []health.Checker{nil, health.Check("leaderElection", ok)}}, "ok"},
		{"watchdog fails", checkedSource{newViewSource(t), []health.Checker{health.Check("other", ok), health.Check("leaderElection", overdue)}},
			"renewal overdue by 3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := liveview.Handler(tt.src)
			t.Cleanup(h.Close)
			res := get(t, serve(t, h), "/debug/supervision/status.json")
			if res.code != http.StatusOK {
				t.Fatalf("status.json: %d %s", res.code, res.body)
			}
			var st liveview.Status
			if err := json.Unmarshal([]byte(res.body), &st); err != nil {
				t.Fatal(err)
			}
			if have := st.Leadership.Renewal; have != tt.want {
				t.Errorf("renewal: have %q, want %q", have, tt.want)
			}
		})
	}
}
