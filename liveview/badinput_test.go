package liveview_test

import (
	"fmt"
	"testing"
	"time"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// A nil manager (a *ControllerManager never assigned) and negative
// durations and counts are refused when the view is built, by a panic
// that names the argument, rather than by a nil-pointer panic in
// Subscribe or by a silent default; every negative option is named at
// once.
func TestHandlerRefusesNilAndNegativeArguments(t *testing.T) {
	var mgr *cm.ControllerManager
	tests := []struct {
		name  string
		build func()
		want  string // the panic
	}{
		{"nil *ControllerManager", func() { liveview.Handler(mgr) }, "liveview: Handler: nil Source (*controllermanager.ControllerManager)"},
		{"negative options", func() {
			liveview.Handler(newViewSource(t), liveview.WithTimeout(-time.Second), liveview.WithRefresh(-time.Second),
				liveview.WithWindow(-time.Minute), liveview.WithStreamBuffer(-1), liveview.WithMaxStreams(-2))
		}, "liveview: Handler: WithTimeout: must not be negative, got -1s\n" +
			"WithRefresh: must not be negative, got -1s\n" +
			"WithStreamBuffer: must not be negative, got -1\n" +
			"WithWindow: must not be negative, got -1m0s\n" +
			"WithMaxStreams: must not be negative, got -2"},
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
	t.Run("zero options are the defaults", func(t *testing.T) {
		h := liveview.Handler(newViewSource(t), liveview.WithTimeout(0), liveview.WithRefresh(0), liveview.WithWindow(0),
			liveview.WithStreamBuffer(0), liveview.WithMaxStreams(0))
		h.Close()
	})
}
