package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStory runs the program once, whole, and checks that each step
// printed what it says.
func TestStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out), out.String())
	text := out.String()
	steps := strings.Split(text, "\n== ")
	require.Len(t, steps, 6, text)
	for i, want := range [][]string{
		{"phase Running", "cluster east   Online", "cluster west   Online", "cluster moon   Offline"},
		{"fleet/north/reconciler", "cluster north  Online"},
		{"cluster east   Online", "cluster north  Online"},
		{"fleet/east             cluster    Stopped", "cluster east   Offline: API server failed its probes", "fleet/north/reconciler controller Running"},
		{"fleet/east/reconciler  controller Running", "cluster east   Online"},
	} {
		for _, w := range want {
			require.Contains(t, steps[i+1], w, "step %d", i+1)
		}
	}
	require.NotContains(t, steps[3], "fleet/west", "west's subtree is gone")
	require.True(t, strings.HasSuffix(text, "shutting down\n"))
}
