package controllermanager_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	cm "github.com/actorkube/controllermanager"
)

// A nil *Group, a nil *Fleet or StoreChild(nil), at the root or in a
// group, at Start or through AddChild, is refused with an error that says
// which, rather than one about a recovered nil-pointer panic in Name.
func TestNilChildrenAreRefusedByName(t *testing.T) {
	var group *cm.Group
	var fleet *cm.Fleet
	tests := []struct {
		name  string
		child cm.Runnable
		want  string
	}{
		{"nil *Group", group, "nil *Group"},
		{"nil *Fleet", fleet, "nil *Fleet"},
		{"StoreChild(nil)", cm.StoreChild(nil), "StoreChild(nil)"},
		{"nil *Group in a group", cm.NewGroup("tenant", cm.SupervisionSpec{}, group), `group "tenant": a nil *Group`},
		{"nil *Fleet in a group", cm.NewGroup("tenant", cm.SupervisionSpec{}, fleet), `group "tenant": a nil *Fleet`},
		{"StoreChild(nil) in a group", cm.NewGroup("tenant", cm.SupervisionSpec{}, cm.StoreChild(nil)), `group "tenant": StoreChild(nil)`},
	}
	check := func(t *testing.T, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "panic") {
			t.Errorf("want an error naming %q, and no panic, have %v", want, err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name+" at Start", func(t *testing.T) {
			m := newQuietManager(t)
			m.Add(tt.child)
			check(t, m.Start(context.Background(), metricsWait), tt.want)
		})
		t.Run(tt.name+" by AddChild", func(t *testing.T) {
			m := newQuietManager(t)
			if err := m.Start(context.Background(), metricsWait); err != nil {
				t.Fatal(err)
			}
			check(t, m.AddChild(context.Background(), tt.child), tt.want)
		})
	}
}

// newQuietManager is a ControllerManager with the default config, shut
// down when the test ends.
func newQuietManager(t *testing.T, opts ...cm.Option) *cm.ControllerManager {
	t.Helper()
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{}, "", append([]cm.Option{cm.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsWait)
		defer cancel()
		m.ShutdownAndWait(ctx)
	})
	return m
}
