package health

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/actorkube/controllermanager/internal/respond"
)

// pprofHandler serves what net/http/pprof serves, without importing it:
// that package's init registers its handlers on http.DefaultServeMux, which
// would expose profiles on any host that serves the default mux, asked or
// not. Delta profiles (?seconds= on a named profile) are not served.
type pprofHandler struct{}

func newPprofHandler() http.Handler { return pprofHandler{} }

func (pprofHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read-only, as the probes: GET and HEAD, and POST on symbol, where
	// go tool pprof posts the addresses it looks up; other methods get 405.
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	if name == "symbol" {
		if !allowMethod(w, r, http.MethodGet, http.MethodHead, http.MethodPost) {
			return
		}
	} else if !allowMethod(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if r.URL.Path == "/debug/pprof" { // the index's links are relative to /debug/pprof/
		http.Redirect(w, r, "pprof/", http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch name {
	case "":
		pprofIndex(w)
	case "cmdline":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, strings.Join(os.Args, "\x00"))
	case "profile":
		if d, ok := recordDuration(w, r, "profile", 30*time.Second); ok {
			record(w, r, "profile", d, pprof.StartCPUProfile, pprof.StopCPUProfile)
		}
	case "trace":
		if d, ok := recordDuration(w, r, "trace", time.Second); ok {
			record(w, r, "trace", d, trace.Start, trace.Stop)
		}
	case "symbol":
		pprofSymbol(w, r)
	default:
		pprofProfile(w, r, name)
	}
}

// recordDuration is the ?seconds= of a CPU profile or a trace (def when
// absent), or, answered 400, a duration that is not a positive number of
// seconds or reaches the serving http.Server's WriteTimeout: the answer
// could not be delivered, and the write timeout is what bounds how long one
// request may hold the profiler. net/http/pprof refuses it the same way.
func recordDuration(w http.ResponseWriter, r *http.Request, name string, def time.Duration) (time.Duration, bool) {
	d := def
	if raw := r.FormValue("seconds"); raw != "" {
		sec, err := strconv.ParseFloat(raw, 64)
		if err != nil || !(sec > 0) || sec > maxRecordSeconds {
			respond.Text(w, http.StatusBadRequest, fmt.Sprintf("invalid %s ?seconds=%q: want a positive number of seconds\n", name, raw))
			return 0, false
		}
		d = time.Duration(sec * float64(time.Second))
	}
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.WriteTimeout > 0 && d >= srv.WriteTimeout {
		respond.Text(w, http.StatusBadRequest, fmt.Sprintf("%s duration %s exceeds the server's WriteTimeout (%s): ask for less with ?seconds=\n",
			name, d, srv.WriteTimeout))
		return 0, false
	}
	return d, true
}

// maxRecordSeconds keeps a ?seconds= within a time.Duration (a server with
// no WriteTimeout sets no other bound).
const maxRecordSeconds = 1 << 30

// record writes what start records until d has passed or the client has
// gone. It leaves the server's write deadline where it is (recordDuration
// has refused a d that reaches it).
func record(w http.ResponseWriter, r *http.Request, name string, d time.Duration, start func(io.Writer) error, stop func()) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	if err := start(w); err != nil { // nothing written yet
		w.Header().Del("Content-Disposition")
		respond.Text(w, http.StatusInternalServerError, fmt.Sprintf("cannot start the %s: %v\n", name, err))
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-r.Context().Done():
	}
	stop()
}

func pprofProfile(w http.ResponseWriter, r *http.Request, name string) {
	p := pprof.Lookup(name)
	if p == nil {
		respond.Text(w, http.StatusNotFound, fmt.Sprintf("unknown profile %q; see /debug/pprof/\n", name))
		return
	}
	if r.FormValue("seconds") != "" {
		respond.Text(w, http.StatusBadRequest, "delta profiles (?seconds=) are not served here: take two profiles and compare them with go tool pprof -diff_base\n")
		return
	}
	if gc, _ := strconv.Atoi(r.FormValue("gc")); name == "heap" && gc > 0 {
		runtime.GC()
	}
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	_ = p.WriteTo(w, debug)
}

// pprofSymbol maps the program counters of the request ("0x1+0x2", in the
// query or a POST body) to function names, as go tool pprof asks.
func pprofSymbol(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	buf.WriteString("num_symbols: 1\n")
	var in *bufio.Reader
	if r.Method == http.MethodPost {
		in = bufio.NewReader(io.LimitReader(r.Body, 1<<20))
	} else {
		in = bufio.NewReader(strings.NewReader(r.URL.RawQuery))
	}
	for {
		word, err := in.ReadString('+')
		word = strings.TrimSuffix(word, "+")
		if pc, _ := strconv.ParseUint(word, 0, 64); pc != 0 {
			if f := runtime.FuncForPC(uintptr(pc)); f != nil {
				fmt.Fprintf(&buf, "%#x %s\n", pc, f.Name())
			}
		}
		if err != nil {
			break
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func pprofIndex(w http.ResponseWriter) {
	type entry struct {
		name  string
		count int
	}
	var entries []entry
	for _, p := range pprof.Profiles() {
		entries = append(entries, entry{p.Name(), p.Count()})
	}
	for _, n := range []string{"cmdline", "profile", "symbol", "trace"} {
		entries = append(entries, entry{name: n})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	b.WriteString("<html><head><title>/debug/pprof/</title></head><body>\n/debug/pprof/<br>\n<table><thead><td>Count</td><td>Profile</td></thead>\n")
	for _, e := range entries {
		n := html.EscapeString(e.name)
		fmt.Fprintf(&b, "<tr><td>%d</td><td><a href='%s?debug=1'>%s</a></td></tr>\n", e.count, n, n)
	}
	b.WriteString("</table>\n<a href='goroutine?debug=2'>full goroutine stack dump</a>\n</body></html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}
