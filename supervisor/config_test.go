package supervisor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestDefaultTimingKeepsTheDesignValues: DESIGN.md fixes the defaults of
// SupervisionSpec; the table in internal/defaults must keep them.
func TestDefaultTimingKeepsTheDesignValues(t *testing.T) {
	assert.Equal(t, Timing{
		Strategy:           OneForOne,
		MaxRestarts:        5,
		RestartWindow:      time.Minute,
		InitialBackoff:     100 * time.Millisecond,
		MaxBackoff:         30 * time.Second,
		HealthInterval:     10 * time.Second,
		HealthTimeout:      time.Second,
		UnhealthyThreshold: 3,
		ShutdownTimeout:    30 * time.Second,
	}, DefaultTiming())
}

// TestConfigFillsEachZeroTimingField: a Timing that sets some fields keeps
// them and gets the default of every other one, not zeros.
func TestConfigFillsEachZeroTimingField(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Timing)
	}{
		{"nothing", func(*Timing) {}},
		{"strategy", func(t *Timing) { t.Strategy = RestForOne }},
		{"maxRestarts", func(t *Timing) { t.MaxRestarts = 1 }},
		{"restartWindow", func(t *Timing) { t.RestartWindow = time.Hour }},
		{"initialBackoff", func(t *Timing) { t.InitialBackoff = time.Millisecond }},
		{"maxBackoff", func(t *Timing) { t.MaxBackoff = time.Hour }},
		{"healthInterval", func(t *Timing) { t.HealthInterval = time.Hour }},
		{"healthTimeout", func(t *Timing) { t.HealthTimeout = time.Hour }},
		{"unhealthyThreshold", func(t *Timing) { t.UnhealthyThreshold = 9 }},
		{"shutdownTimeout", func(t *Timing) { t.ShutdownTimeout = time.Hour }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var given Timing
			tt.set(&given)
			want := DefaultTiming()
			tt.set(&want)
			cfg := Config{Timing: given}
			cfg.fill()
			assert.Equal(t, want, cfg.Timing)
		})
	}
}
