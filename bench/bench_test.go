package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thejerf/suture/v4"
	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
)

func TestMain(m *testing.M) {
	// The tests check what the harness reports and that every cycle is sound, not
	// the heap figures: a shorter wait for the heap to hold still keeps the many
	// cycles of TestTableShape quick.
	heapSettle.poll, heapSettle.agree = time.Millisecond, 2
	goleak.VerifyTestMain(m)
}

// testTimeout bounds one test's cycles; tiny N finish in milliseconds.
const testTimeout = time.Minute

// TestEverySystemCycle runs one cycle of every built-in system at a tiny N: every child
// runs, is healthy where the system gathers health, restarts where it supervises, and
// has each run shut down (runCycle checks the last).
func TestEverySystemCycle(t *testing.T) {
	for _, newSystem := range allSystems {
		sys := newSystem()
		t.Run(sys.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			const n, restarts = 7, 3
			have, err := runCycle(ctx, sys, n, restarts)
			if err != nil {
				t.Fatal(err)
			}
			if _, want := sys.(healthSweeper); have.hasHealth != want {
				t.Errorf("hasHealth = %v, want %v", have.hasHealth, want)
			}
			wantRestarts := 0
			if _, ok := sys.(restarter); ok {
				wantRestarts = restarts
			}
			if len(have.restarts) != wantRestarts {
				t.Errorf("%d restarts, want %d", len(have.restarts), wantRestarts)
			}
			if have.start <= 0 || have.shutdown <= 0 {
				t.Errorf("start %v, shutdown %v: want both timed", have.start, have.shutdown)
			}
		})
	}
}

// TestTableShape runs the whole harness at tiny N and checks the table: a header naming
// every system and a ratio column per peer (ours ÷ peer), a row per
// (workload, N) with a cell per column, and n/a exactly where a system lacks the
// capability. The JSON holds one result per cell.
//
// Two trees run beside the flat systems, each only at the N its shape holds: ours'
// groups and suture's nested supervisors at depth 2 (2x5) and depth 3 (1x1x3), with their
// ratio columns to flat ours and to suture's tree of the same shape; every cell of a
// tree at the other N is n/a.
func TestTableShape(t *testing.T) {
	sizes := []int{3, 10}
	shapes := []shape{{2, 5}, {1, 1, 3}}
	makers := withTrees(shapes)
	r, err := run(t.Context(), settings{sizes: sizes, reps: 2, restarts: 2, timeout: testTimeout}, makers)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := writeTable(&table, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	systems := make([]system, len(makers))
	wantHeader := []string{"workload", "N"}
	for i, m := range makers {
		systems[i] = m()
		wantHeader = append(wantHeader, systems[i].Name())
	}
	wantNames := []string{"seed", "controller-runtime", "suture", "protoactor", "suture-2x5", "suture-1x1x3",
		"ours", "ours-2x5", "ours-1x1x3"}
	if !slices.Equal(wantHeader[2:], wantNames) {
		t.Fatalf("systems %q, want %q", wantHeader[2:], wantNames)
	}
	for _, peer := range []string{"seed", "controller-runtime", "suture", "protoactor"} {
		wantHeader = append(wantHeader, "ours/"+peer)
	}
	wantHeader = append(wantHeader, "ours-2x5/ours", "ours-2x5/suture-2x5", "ours-1x1x3/ours", "ours-1x1x3/suture-1x1x3")
	sizeOf := func(s system) int {
		if sz, ok := s.(sizedSystem); ok {
			return sz.Size()
		}
		return 0
	}

	lines := strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")
	if want := 2 + len(workloads)*len(sizes); len(lines) != want {
		t.Fatalf("%d lines, want %d", len(lines), want)
	}
	rows := make([][]string, len(lines))
	for i, line := range lines {
		if !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") {
			t.Fatalf("line %d is not a table row: %q", i, line)
		}
		rows[i] = strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if len(rows[i]) != len(wantHeader) {
			t.Fatalf("line %d has %d cells, want %d: %q", i, len(rows[i]), len(wantHeader), line)
		}
	}
	if !slices.Equal(rows[0], wantHeader) {
		t.Errorf("header = %q, want %q", rows[0], wantHeader)
	}
	if want := slices.Repeat([]string{"---"}, len(wantHeader)); !slices.Equal(rows[1], want) {
		t.Errorf("separator = %q", rows[1])
	}
	for _, row := range rows[2:] {
		for i, s := range systems {
			_, sweeps := s.(healthSweeper)
			_, restarts := s.(restarter)
			size := sizeOf(s)
			wantNA := (row[0] == "health sweep" && !sweeps) ||
				(strings.HasPrefix(row[0], "restart") && !restarts) ||
				(size != 0 && row[1] != fmt.Sprint(size))
			if haveNA := row[2+i] == "n/a"; haveNA != wantNA {
				t.Errorf("%s N=%s %s = %q, want n/a: %v", row[0], row[1], s.Name(), row[2+i], wantNA)
			}
		}
		// A tree's ratio to flat ours exists exactly at its own N.
		for j, col := range wantHeader {
			tree, ok := strings.CutSuffix(col, "/ours")
			if !ok || !strings.HasPrefix(tree, "ours-") {
				continue
			}
			_, sh, _ := splitTreeName(tree)
			wantNA := row[1] != fmt.Sprint(sh.size())
			if haveNA := row[j] == "n/a"; haveNA != wantNA {
				t.Errorf("%s N=%s %s = %q, want n/a: %v", row[0], row[1], col, row[j], wantNA)
			}
		}
	}

	var js bytes.Buffer
	if err := writeJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var decoded report
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if want := len(workloads) * len(sizes) * len(systems); len(decoded.Results) != want {
		t.Errorf("JSON has %d results, want %d", len(decoded.Results), want)
	}
}

// TestControllerRuntimeNeedsNoAPIServer points the manager at a server that records
// every request: a manager with no caches, informers, leader election, metrics or
// probes must start, sweep and stop without sending one.
func TestControllerRuntimeNeedsNoAPIServer(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	apiServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		http.Error(w, "the bench has no API server", http.StatusServiceUnavailable)
	}))
	defer apiServer.Close()

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	sys := &controllerRuntimeSystem{config: &rest.Config{Host: apiServer.URL}}
	if _, err := runCycle(ctx, sys, 5, 0); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) > 0 {
		t.Errorf("the manager contacted the API server: %q", paths)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	tests := []struct {
		samples     []float64
		median, p50 float64
		p99         float64
	}{
		{samples: []float64{5}, median: 5, p50: 5, p99: 5},
		{samples: []float64{3, 1, 2}, median: 2, p50: 2, p99: 3},
		{samples: []float64{4, 1, 3, 2}, median: 2.5, p50: 2, p99: 4},
	}
	for _, tt := range tests {
		if have := median(tt.samples); have != tt.median {
			t.Errorf("median(%v) = %v, want %v", tt.samples, have, tt.median)
		}
		if have := percentile(tt.samples, 50); have != tt.p50 {
			t.Errorf("percentile(%v, 50) = %v, want %v", tt.samples, have, tt.p50)
		}
		if have := percentile(tt.samples, 99); have != tt.p99 {
			t.Errorf("percentile(%v, 99) = %v, want %v", tt.samples, have, tt.p99)
		}
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	if have := percentile(hundred, 99); have != 99 {
		t.Errorf("percentile(1..100, 99) = %v, want 99", have)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Nanosecond, "850ns"},
		{12345 * time.Nanosecond, "12.3µs"},
		{4560 * time.Microsecond, "4.56ms"},
		{1234 * time.Millisecond, "1.23s"},
	}
	for _, tt := range tests {
		if have := formatDuration(tt.d); have != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, have, tt.want)
		}
	}
}

func TestFormatRatio(t *testing.T) {
	v := func(f float64) result { return result{Value: &f} }
	tests := []struct {
		ours, peer result
		want       string
	}{
		{v(3), v(2), "1.50×"},
		{v(3), result{}, "n/a"},
		{result{}, v(2), "n/a"},
		{v(3), v(0), "—"},
	}
	for _, tt := range tests {
		if have := formatRatio(tt.ours, tt.peer); have != tt.want {
			t.Errorf("formatRatio = %q, want %q", have, tt.want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "100,1000, 10_000", want: []int{100, 1000, 10000}},
		{in: "5", want: []int{5}},
		{in: "0", wantErr: true},
		{in: "10,x", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		have, err := parseSizes(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(have, tt.want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v, error %v", tt.in, have, err, tt.want, tt.wantErr)
		}
	}
}

func TestSelectSystems(t *testing.T) {
	picked, err := selectSystems("suture, seed", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range picked {
		names = append(names, m().Name())
	}
	if want := []string{"suture", "seed"}; !slices.Equal(names, want) {
		t.Errorf("picked %q, want %q", names, want)
	}
	if _, err := selectSystems("nope", nil); err == nil {
		t.Error("an unknown system was accepted")
	}
	picked, err = selectSystems("ours-2x5,suture-2x5", []shape{{2, 5}})
	if err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, m := range picked {
		names = append(names, m().Name())
	}
	if want := []string{"ours-2x5", "suture-2x5"}; !slices.Equal(names, want) {
		t.Errorf("picked %q, want %q", names, want)
	}
	if _, err := selectSystems("ours-2x5", nil); err == nil {
		t.Error("a tree was accepted without its shape")
	}
}

// TestTreesAreTrees starts each tree system of a small shape and checks that it is the
// tree it names: ours' children are named by their paths through the groups ("g1/g0/child-6"
// at depth 3), suture's services sit under nested supervisors at the shape's depth with
// the shape's fan-out; and a failed child is restarted alone, by its group, its siblings
// left running.
func TestTreesAreTrees(t *testing.T) {
	for _, sh := range []shape{{2, 3}, {2, 2, 3}} {
		for _, sys := range []system{&oursSystem{shape: sh}, &sutureSystem{shape: sh}} {
			t.Run(sys.Name(), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
				defer cancel()
				n := sh.size()
				children := newChildren(n)
				if err := sys.Start(ctx, children); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := sys.Shutdown(ctx); err != nil {
						t.Error(err)
					}
				}()
				for _, c := range children {
					if err := c.waitRunning(ctx); err != nil {
						t.Fatal(err)
					}
				}

				switch sys := sys.(type) {
				case *oursSystem:
					var want, have []string
					groups := map[string]bool{}
					for k, c := range children {
						path := treePath(sh, k)
						want = append(want, path+c.name)
						for p := strings.TrimSuffix(path, "/"); p != ""; p = p[:max(strings.LastIndexByte(p, '/'), 0)] {
							groups[p] = true // each group's own line follows the controllers'
						}
					}
					for g := range groups {
						want = append(want, g)
					}
					for _, h := range sys.mgr.GetHealth() {
						have = append(have, h.Name)
					}
					slices.Sort(want)
					slices.Sort(have)
					if !slices.Equal(have, want) {
						t.Errorf("GetHealth names %q, want %q", have, want)
					}
				case *sutureSystem:
					var walk func(sup *suture.Supervisor, depth int)
					leaves := 0
					walk = func(sup *suture.Supervisor, depth int) {
						services := sup.Services()
						if len(services) != sh[depth] {
							t.Errorf("a supervisor at depth %d has %d services, want %d", depth, len(services), sh[depth])
						}
						for _, svc := range services {
							switch svc := svc.(type) {
							case *suture.Supervisor:
								walk(svc, depth+1)
							case *sutureService:
								if depth != sh.depth()-1 {
									t.Errorf("%s is under %d supervisors, want %d", svc.child.name, depth+1, sh.depth())
								}
								leaves++
							default:
								t.Errorf("unexpected service %T", svc)
							}
						}
					}
					walk(sys.root, 0)
					if leaves != n {
						t.Errorf("%d children in the tree, want %d", leaves, n)
					}
				}

				failed := children[n-2]
				failed.forgetRuns()
				if err := sys.(restarter).Fail(ctx, n-2); err != nil {
					t.Fatal(err)
				}
				if err := failed.waitRunning(ctx); err != nil {
					t.Fatal(err)
				}
				for _, c := range children {
					want := int32(1)
					if c == failed {
						want = 2
					}
					if runs := c.runs.Load(); runs != want {
						t.Errorf("%s ran %d times, want %d", c.name, runs, want)
					}
				}
			})
		}
	}
}

// treePath is the path of the groups that hold child k in a tree of shape sh, with a
// trailing "/": "g1/g0/" for child 6 of 2x2x3.
func treePath(sh shape, k int) string {
	path := ""
	per := sh.size()
	for _, f := range sh[:len(sh)-1] {
		per /= f
		path += fmt.Sprintf("g%d/", k/per)
		k %= per
	}
	return path
}

func TestParseShapes(t *testing.T) {
	tests := []struct {
		in      string
		want    []shape
		wantErr bool
	}{
		{in: "100x100, 10x10x100", want: []shape{{100, 100}, {10, 10, 100}}},
		{in: "", want: nil},
		{in: "100", wantErr: true},
		{in: "10x0", wantErr: true},
		{in: "10xx10", wantErr: true},
		{in: "10x-1", wantErr: true},
		{in: "2x5,2x5", wantErr: true},
	}
	for _, tt := range tests {
		have, err := parseShapes(tt.in)
		if (err != nil) != tt.wantErr || !slices.EqualFunc(have, tt.want, func(a, b shape) bool { return slices.Equal(a, b) }) {
			t.Errorf("parseShapes(%q) = %v, %v; want %v, error %v", tt.in, have, err, tt.want, tt.wantErr)
		}
	}
	if s := (shape{10, 10, 100}); s.String() != "10x10x100" || s.size() != 10_000 || s.depth() != 3 {
		t.Errorf("shape %v: String %q, size %d, depth %d", []int(s), s.String(), s.size(), s.depth())
	}
	for name, want := range map[string]bool{"ours-100x100": true, "suture-10x10x100": true, "controller-runtime": false, "ours": false} {
		if _, _, have := splitTreeName(name); have != want {
			t.Errorf("splitTreeName(%q) is a tree: %v, want %v", name, have, want)
		}
	}
}

// TestRunRefusesATreeOfNoSize: a tree whose shape holds no N being run is an error
// naming it, not a column of n/a.
func TestRunRefusesATreeOfNoSize(t *testing.T) {
	_, err := run(t.Context(), settings{sizes: []int{3}, reps: 1, timeout: testTimeout}, withTrees([]shape{{2, 2}}))
	if err == nil || !strings.Contains(err.Error(), "suture-2x2 holds 4 children") {
		t.Errorf("run = %v, want an error naming suture-2x2 and its 4 children", err)
	}
}
