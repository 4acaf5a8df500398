package statespace

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"
)

// admissionClients is how many clients send AdmissionReviews to the
// manager's handler while a sequence runs, each every admissionEvery, to
// a webhook of the sequence drawn in turn: Handle calls meet every stop,
// restart and removal of the webhooks (HandleOutside,
// HandleBesideShutdown).
const (
	admissionClients = 2
	admissionEvery   = 3 * time.Millisecond
)

// startAdmission starts the admission clients; they stop at stopAdmission.
func (r *runner) startAdmission() {
	h := r.m.Handler()
	for c := range admissionClients {
		r.background.Add(1)
		go func() {
			defer r.background.Done()
			tick := time.NewTicker(admissionEvery)
			defer tick.Stop()
			for n := c; ; n += admissionClients {
				select {
				case <-r.admissionStop:
					return
				case <-tick.C:
				}
				path := r.webhookPath(n)
				if path == "" {
					continue
				}
				body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"ss-%d","operation":"CREATE","object":{}}}`, n)
				req := httptest.NewRequest(http.MethodPost, path+"?timeout=2s", bytes.NewBufferString(body))
				req.Header.Set("Content-Type", "application/json")
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		}()
	}
}

// webhookPath is the path of the sequence's n-th webhook (round robin),
// or "" when it has none.
func (r *runner) webhookPath(n int) string {
	r.mu.Lock()
	var paths []string
	for name, c := range r.children {
		if c.kind == "webhook" {
			paths = append(paths, "/"+name)
		}
	}
	r.mu.Unlock()
	if len(paths) == 0 {
		return ""
	}
	slices.Sort(paths)
	return paths[n%len(paths)]
}
