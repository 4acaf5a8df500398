package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Units of a result's value.
const (
	unitNanoseconds = "ns"
	unitBytes       = "bytes"
	unitGoroutines  = "goroutines"
)

// oursName is ours' column; the ratio columns divide it by each peer. A tree of ours is
// "ours-" and its shape (treeName).
const oursName = "ours"

// report is everything one run measured; -json writes it as is.
type report struct {
	GoVersion  string   `json:"goVersion"`
	GOOS       string   `json:"goos"`
	GOARCH     string   `json:"goarch"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	Reps       int      `json:"reps"`
	Sizes      []int    `json:"sizes"`
	Systems    []string `json:"systems"`
	Results    []result `json:"results"`
}

// result is one table cell: a workload at one N for one system.
type result struct {
	Workload string `json:"workload"`
	N        int    `json:"n"`
	System   string `json:"system"`
	Unit     string `json:"unit"`
	// Value is the median over reps (restart rows: the percentile of all samples);
	// null where the system cannot do the workload.
	Value *float64 `json:"value"`
	// Samples are the raw measurements: one per rep, or one per restart.
	Samples []float64 `json:"samples,omitempty"`
}

// workload is one kind of row: how to read its samples from cycles and reduce them.
type workload struct {
	name    string
	unit    string
	samples func(cycles []cycle) (samples []float64, ok bool)
	reduce  func(samples []float64) float64
}

// workloads are the table's rows, in order; each appears once per N.
var workloads = []workload{
	{"start", unitNanoseconds, perCycle(func(c cycle) (float64, bool) { return float64(c.start), true }), median},
	{"health sweep", unitNanoseconds, perCycle(func(c cycle) (float64, bool) { return float64(c.health), c.hasHealth }), median},
	{"shutdown", unitNanoseconds, perCycle(func(c cycle) (float64, bool) { return float64(c.shutdown), true }), median},
	{"restart p50", unitNanoseconds, pooledRestarts, func(s []float64) float64 { return percentile(s, 50) }},
	{"restart p99", unitNanoseconds, pooledRestarts, func(s []float64) float64 { return percentile(s, 99) }},
	{"heap/child", unitBytes, perCycle(func(c cycle) (float64, bool) { return c.heapPerChild, true }), median},
	{"goroutines/child", unitGoroutines, perCycle(func(c cycle) (float64, bool) { return c.goroutinesPerChild, true }), median},
}

// perCycle reads one sample from each cycle; the workload is n/a if any cycle lacks it.
func perCycle(read func(cycle) (float64, bool)) func([]cycle) ([]float64, bool) {
	return func(cycles []cycle) ([]float64, bool) {
		samples := make([]float64, 0, len(cycles))
		for _, c := range cycles {
			v, ok := read(c)
			if !ok {
				return nil, false
			}
			samples = append(samples, v)
		}
		return samples, len(samples) > 0
	}
}

// pooledRestarts gathers the restart latencies of every cycle.
func pooledRestarts(cycles []cycle) ([]float64, bool) {
	var samples []float64
	for _, c := range cycles {
		if c.restarts == nil {
			return nil, false
		}
		for _, d := range c.restarts {
			samples = append(samples, float64(d))
		}
	}
	return samples, len(samples) > 0
}

// median is the middle sample, or the mean of the two middle ones.
func median(samples []float64) float64 {
	s := slices.Sorted(slices.Values(samples))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile is the nearest-rank p-th percentile.
func percentile(samples []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(samples))
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// summarize turns the cycles of one system at one N into one result per workload.
func summarize(system string, n int, cycles []cycle) []result {
	results := make([]result, 0, len(workloads))
	for _, w := range workloads {
		r := result{Workload: w.name, N: n, System: system, Unit: w.unit}
		if samples, ok := w.samples(cycles); ok {
			v := w.reduce(samples)
			r.Value, r.Samples = &v, samples
		}
		results = append(results, r)
	}
	return results
}

// writeJSON writes the report, indented.
func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable writes the report as one Markdown table: a row per (workload, N), a
// column per system, then the ratio columns (ratioColumns): ours divided by each peer,
// and each tree of ours divided by flat ours and by suture's tree of its shape.
func writeTable(w io.Writer, r *report) error {
	cells := make(map[[3]string]result, len(r.Results))
	for _, res := range r.Results {
		cells[[3]string{res.Workload, fmt.Sprint(res.N), res.System}] = res
	}
	ratios := ratioColumns(r.Systems)
	header := append([]string{"workload", "N"}, r.Systems...)
	for _, q := range ratios {
		header = append(header, q[0]+"/"+q[1])
	}
	rows := [][]string{header, slices.Repeat([]string{"---"}, len(header))}
	for _, w := range workloads {
		for _, n := range r.Sizes {
			key := func(system string) [3]string { return [3]string{w.name, fmt.Sprint(n), system} }
			row := []string{w.name, fmt.Sprint(n)}
			for _, s := range r.Systems {
				row = append(row, formatValue(cells[key(s)]))
			}
			for _, q := range ratios {
				row = append(row, formatRatio(cells[key(q[0])], cells[key(q[1])]))
			}
			rows = append(rows, row)
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ratioColumns are the table's ratio columns, each {numerator, denominator}, among
// systems (in column order): when flat ours ("ours") was run, ours ÷ each flat peer;
// then, for each tree of ours ("ours-100x100"), the tree ÷ flat ours and the tree ÷
// suture's nesting of the same shape ("suture-100x100"), where those were run.
func ratioColumns(systems []string) [][2]string {
	var ratios [][2]string
	if slices.Contains(systems, oursName) {
		for _, s := range systems {
			if _, _, tree := splitTreeName(s); s != oursName && !tree {
				ratios = append(ratios, [2]string{oursName, s})
			}
		}
	}
	for _, s := range systems {
		system, sh, tree := splitTreeName(s)
		if !tree || system != oursName {
			continue
		}
		if slices.Contains(systems, oursName) {
			ratios = append(ratios, [2]string{s, oursName})
		}
		if nested := treeName(sutureName, sh); slices.Contains(systems, nested) {
			ratios = append(ratios, [2]string{s, nested})
		}
	}
	return ratios
}

// formatValue renders a cell in its unit; "n/a" where the system cannot do the workload.
func formatValue(r result) string {
	if r.Value == nil {
		return "n/a"
	}
	switch r.Unit {
	case unitNanoseconds:
		return formatDuration(time.Duration(*r.Value))
	case unitBytes:
		return fmt.Sprintf("%.0f B", *r.Value)
	default:
		return fmt.Sprintf("%.2f", *r.Value)
	}
}

// formatDuration renders d with three significant digits.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
}

// formatRatio renders ours ÷ peer; "n/a" if either lacks a value, "—" if the peer's
// value is zero or negative (no meaningful ratio, e.g. goroutines of the seed).
func formatRatio(ours, peer result) string {
	switch {
	case ours.Value == nil || peer.Value == nil:
		return "n/a"
	case *peer.Value <= 0:
		return "—"
	default:
		return fmt.Sprintf("%.2f×", *ours.Value / *peer.Value)
	}
}
