package e2e

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// figures collects what the scenarios measure, for the summary TestMain prints.
var figures struct {
	mu   sync.Mutex
	rows []figureRow
}

type figureRow struct {
	test, name string
	value      time.Duration
	shown      string // the value as printed, for a figure that is not a duration (figureText)
	note       string
}

// figure logs a measurement and keeps it for the summary.
func figure(t *testing.T, name string, value time.Duration, note string) {
	t.Helper()
	t.Logf("figure: %s = %s %s", name, value.Round(time.Millisecond), note)
	figures.mu.Lock()
	defer figures.mu.Unlock()
	figures.rows = append(figures.rows, figureRow{test: t.Name(), name: name, value: value, note: note})
}

// printFigures writes the summary: each figure's values, in the order measured.
func printFigures(w io.Writer, wall time.Duration) {
	figures.mu.Lock()
	defer figures.mu.Unlock()
	var names []string
	values := map[string][]string{}
	notes := map[string]string{}
	for _, r := range figures.rows {
		if !slices.Contains(names, r.name) {
			names = append(names, r.name)
		}
		shown := r.value.Round(time.Millisecond).String()
		if r.shown != "" {
			shown = r.shown
		}
		values[r.name] = append(values[r.name], shown)
		notes[r.name] = r.note
	}
	fmt.Fprintf(w, "e2e figures (lease %s, renew deadline %s, retry period %s):\n", leaseDuration, renewDeadline, retryPeriod)
	for _, n := range names {
		fmt.Fprintf(w, "  %-48s %s  %s\n", n, strings.Join(values[n], ", "), notes[n])
	}
	fmt.Fprintf(w, "  %-48s %s\n", "suite wall time (tests, after the binaries)", wall.Round(time.Second))
}

// figureText logs a measurement that is not a duration (a rate, a count), already
// formatted, and keeps it for the summary.
func figureText(t *testing.T, name, shown, note string) {
	t.Helper()
	t.Logf("figure: %s = %s %s", name, shown, note)
	figures.mu.Lock()
	defer figures.mu.Unlock()
	figures.rows = append(figures.rows, figureRow{test: t.Name(), name: name, shown: shown, note: note})
}
