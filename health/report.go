package health

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/actorkube/controllermanager/actors"
)

// Report is the body of /healthz, /livez and /readyz when the request
// asks for JSON (Accept: application/json); excluded checks are left out.
type Report struct {
	// Healthy is true when every check in Status and Checks is.
	Healthy bool `json:"healthy"`
	// Status is the controllers' health, as the Source's GetHealth reports
	// it: the seed's report.
	Status []actors.HealthStatus `json:"status"`
	// Checks are the other checks: the phase, the Source's own and the
	// host's, in the order they ran. A Message on a healthy check is a
	// detail (the phase); on a failed one, the reason.
	Checks []actors.HealthStatus `json:"checks,omitempty"`
}

func newReport(outs []outcome) Report {
	rep := Report{Healthy: true, Status: []actors.HealthStatus{}}
	for _, o := range outs {
		if o.excluded {
			continue
		}
		if o.err != nil {
			rep.Healthy = false
		}
		if o.status != nil {
			rep.Status = append(rep.Status, *o.status)
			continue
		}
		st := actors.HealthStatus{Name: o.name, Healthy: o.err == nil, Message: o.message}
		if o.err != nil {
			st.Message = o.err.Error()
		}
		rep.Checks = append(rep.Checks, st)
	}
	return rep
}

// listing is the text listing of a probe in k8s.io/apiserver's healthz
// format: per check "[+]name ok", "[+]name excluded: ok", or "[-]name
// failed: reason withheld" (the reason itself when verbose), then a warning
// naming the exclusions that matched nothing, then the verdict. The
// apiserver names its verdict after the endpoint ("livez check passed"),
// and so does this. A check's name is written with its control characters
// escaped (oneLine), so a name never forges lines of its own.
func listing(ep endpoint, outs []outcome, unmatched []string, verbose bool) string {
	var b strings.Builder
	healthy := true
	for _, o := range outs {
		name := oneLine(o.name)
		switch {
		case o.excluded:
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", name)
		case o.err != nil:
			healthy = false
			reason := "reason withheld"
			if verbose {
				reason = flatten(o.err.Error())
			}
			fmt.Fprintf(&b, "[-]%s failed: %s\n", name, reason)
		default:
			fmt.Fprintf(&b, "[+]%s ok\n", name)
		}
	}
	if len(unmatched) > 0 {
		sorted := slices.Sorted(slices.Values(unmatched))
		quoted := make([]string, len(sorted))
		for i, n := range sorted {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		fmt.Fprintf(&b, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(quoted, ","))
	}
	if healthy {
		fmt.Fprintf(&b, "%s check passed\n", ep.name)
	} else {
		fmt.Fprintf(&b, "%s check failed\n", ep.name)
	}
	return b.String()
}

// acceptsJSON reports whether the request asks for JSON: an Accept header
// naming application/json (parameters and q-values aside).
func acceptsJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			media, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(media), "application/json") {
				return true
			}
		}
	}
	return false
}

// oneLine is name as the listing writes it: each control character
// escaped as Go quotes it ("\n", "\x1b", "\u0085"), every other character
// as it is; a name without one is returned unchanged.
func oneLine(name string) string {
	if strings.IndexFunc(name, unicode.IsControl) < 0 {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// flatten keeps a reason on one line of the listing.
func flatten(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// exclusions are the ?exclude= names of one request, each matched
// exactly against the checks' names, spaces included, as
// k8s.io/apiserver's healthz (getExcludedChecks) and controller-runtime's
// match them: a check whose name begins or ends with a space (a controller
// may be so named) is excluded by that name, and only by it. An empty
// ?exclude= names no check and is ignored.
type exclusions struct {
	names []string // in the order given
	used  map[string]bool
}

func newExclusions(names []string) *exclusions {
	e := &exclusions{used: map[string]bool{}}
	for _, n := range names {
		if _, seen := e.used[n]; n != "" && !seen {
			e.names = append(e.names, n)
			e.used[n] = false
		}
	}
	return e
}

// take reports whether name is excluded, and marks the exclusion used.
func (e *exclusions) take(name string) bool {
	if _, ok := e.used[name]; ok {
		e.used[name] = true
		return true
	}
	return false
}

// unmatched lists the exclusions that matched no check.
func (e *exclusions) unmatched() []string {
	var out []string
	for _, n := range e.names {
		if !e.used[n] {
			out = append(out, n)
		}
	}
	return out
}
