package supervise

import (
	"testing"
	"time"

	"github.com/actorkube/controllermanager/supervisor"
	"github.com/stretchr/testify/assert"
)

// TestDefaultsKeepTheDesignValues: DESIGN.md fixes the defaults of
// SupervisionSpec; the table in internal/defaults must keep them.
func TestDefaultsKeepTheDesignValues(t *testing.T) {
	assert.Equal(t, Policy{Strategy: supervisor.OneForOne, MaxRestarts: 5, RestartWindow: time.Minute}, DefaultPolicy())
	assert.Equal(t, Timing{
		InitialBackoff:     100 * time.Millisecond,
		MaxBackoff:         30 * time.Second,
		HealthInterval:     10 * time.Second,
		HealthTimeout:      time.Second,
		UnhealthyThreshold: 3,
		ShutdownTimeout:    30 * time.Second,
	}, DefaultTiming())
}

// TestConfigFillsEachZeroField: a Policy or Timing that sets some fields
// keeps them and gets the default of every other one, not zeros.
func TestConfigFillsEachZeroField(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Policy, *Timing)
	}{
		{"nothing", func(*Policy, *Timing) {}},
		{"strategy", func(p *Policy, _ *Timing) { p.Strategy = supervisor.RestForOne }},
		{"maxRestarts", func(p *Policy, _ *Timing) { p.MaxRestarts = 1 }},
		{"restartWindow", func(p *Policy, _ *Timing) { p.RestartWindow = time.Hour }},
		{"initialBackoff", func(_ *Policy, t *Timing) { t.InitialBackoff = time.Millisecond }},
		{"maxBackoff", func(_ *Policy, t *Timing) { t.MaxBackoff = time.Hour }},
		{"healthInterval", func(_ *Policy, t *Timing) { t.HealthInterval = time.Hour }},
		{"healthTimeout", func(_ *Policy, t *Timing) { t.HealthTimeout = time.Hour }},
		{"unhealthyThreshold", func(_ *Policy, t *Timing) { t.UnhealthyThreshold = 9 }},
		{"shutdownTimeout", func(_ *Policy, t *Timing) { t.ShutdownTimeout = time.Hour }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var cfg Config
			tt.set(&cfg.Policy, &cfg.Timing)
			wantPolicy, wantTiming := DefaultPolicy(), DefaultTiming()
			tt.set(&wantPolicy, &wantTiming)
			cfg.fill()
			assert.Equal(t, wantPolicy, cfg.Policy)
			assert.Equal(t, wantTiming, cfg.Timing)
		})
	}
}
