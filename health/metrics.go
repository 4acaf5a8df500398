package health

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/actorkube/controllermanager/internal/respond"
)

// MetricsHandler serves the metrics of g in the Prometheus exposition
// formats (text, and OpenMetrics when the scraper asks for it), to GET and
// HEAD; other methods get 405 with Allow: GET, HEAD, as on NewHandler's
// /metrics, which serves this handler. Pass a manager's Gatherer, or the
// host's registry when the manager's metrics are registered on it
// (WithRegisterer). It panics when g is nil (a nil *prometheus.Registry
// too).
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	switch {
	case g == nil:
		panic("health: MetricsHandler: nil Gatherer")
	case nilPointer(g):
		panic(fmt.Sprintf("health: MetricsHandler: nil Gatherer (%T)", g))
	}
	return readOnly{promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})}
}

// readOnly serves GET and HEAD with its handler, and answers other methods
// 405: the exposition handler itself takes any.
type readOnly struct{ http.Handler }

func (h readOnly) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowMethod(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	h.Handler.ServeHTTP(w, r)
}

// allowMethod reports whether r's method is one of methods; if not, it
// answers 405, with methods as the Allow header, naming the path.
func allowMethod(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	n := len(methods)
	use := strings.Join(methods[:n-1], ", ") + " or " + methods[n-1]
	respond.Text(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: use %s\n", r.Method, r.URL.Path, use))
	return false
}
