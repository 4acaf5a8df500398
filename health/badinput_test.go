package health_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/health"
)

// nilChecker is a Checker whose nil pointer dereferences in Check.
type nilChecker struct{ name string }

func (c *nilChecker) Name() string              { return c.name }
func (c *nilChecker) Check(*http.Request) error { return nil }

// A nil manager (a *ControllerManager never assigned), a nil check, a nil
// check function and a negative timeout are refused when the handler is
// built, by a panic that names the argument (as http.Handle's for a nil
// handler), rather than by a nil-pointer panic in NewHandler or in a
// request, or by a silent default.
func TestNewHandlerRefusesNilAndNegativeArguments(t *testing.T) {
	var mgr *cm.ControllerManager
	var checker *nilChecker
	tests := []struct {
		name  string
		build func()
		want  string // the panic
	}{
		{"nil *ControllerManager", func() { health.NewHandler(mgr) }, "health: NewHandler: nil Source (*controllermanager.ControllerManager)"},
		{"nil check func", func() { health.NewHandler(&source{}, health.WithLivezCheck(health.Check("db", nil))) }, `health: NewHandler: WithLivezCheck: check "db": health.Check was given a nil func`},
		{"nil *Checker", func() { health.NewHandler(&source{}, health.WithReadyzCheck(checker)) }, "health: NewHandler: WithReadyzCheck: check #0 is nil (*health_test.nilChecker)"},
		{"nil *Registry", func() { health.NewHandler(&source{}, health.WithMetrics((*prometheus.Registry)(nil))) }, "health: MetricsHandler: nil Gatherer (*prometheus.Registry)"},
		{"negative WithTimeout", func() { health.NewHandler(&source{}, health.WithTimeout(-time.Second)) }, "health: NewHandler: WithTimeout: must not be negative, got -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if have := fmt.Sprint(recover()); have != tt.want {
					t.Errorf("panic: want %q, have %q", tt.want, have)
				}
			}()
			tt.build()
		})
	}
	t.Run("zero WithTimeout is the default", func(t *testing.T) {
		if h := health.NewHandler(&source{}, health.WithTimeout(0)); h == nil {
			t.Error("no handler")
		}
	})
	t.Run("nil option is skipped", func(t *testing.T) {
		if h := health.NewHandler(&source{}, nil); h == nil {
			t.Error("no handler")
		}
	})
}
