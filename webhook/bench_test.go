package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	cm "github.com/actorkube/controllermanager"
)

// admClients is how many clients post reviews at once in the benchmark.
const admClients = 64

// BenchmarkAdmission measures admission requests per second through one
// webhook, with admClients concurrent clients over HTTP keep-alive
// connections: "plain" serves the webhook's Handle with a plain
// http.HandlerFunc that decodes, calls and encodes, as a hand-written
// webhook server does; "actor" serves the same Handle through a manager's
// Handler, each request flowing to the webhook's actor. Compare their
// req/s: go test -run '^$' -bench Admission -count 5.
func BenchmarkAdmission(b *testing.B) {
	body := admBody(b, admV1)

	b.Run("plain", func(b *testing.B) {
		hook := newAdmHook("validate", "/validate")
		srv := httptest.NewServer(admPlainHandler(hook))
		defer srv.Close()
		admLoad(b, srv.URL+"/validate?timeout=10s", body)
	})

	b.Run("actor", func(b *testing.B) {
		hook := newAdmHook("validate", "/validate")
		mgr := cm.NewWebhookManager(cm.NewContext(nil), admQuiet)
		mgr.Add(hook)
		if err := mgr.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer mgr.ShutdownAndWait(context.Background())
		srv := httptest.NewServer(mgr.Handler())
		defer srv.Close()
		admLoad(b, srv.URL+"/validate?timeout=10s", body)
	})
}

// admPlainHandler serves wh without a manager: the baseline.
func admPlainHandler(wh cm.Webhook) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != wh.Path() {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 7<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp, err := wh.Handle(r.Context(), review.Request)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := *resp
		out.UID = review.Request.UID
		review.Request, review.Response = nil, &out
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
}

// admLoad posts body to url from admClients goroutines until b.N requests
// have been answered, and reports the rate.
func admLoad(b *testing.B, url string, body []byte) {
	tr := &http.Transport{MaxIdleConnsPerHost: admClients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((admClients + procs - 1) / procs)
	b.ReportAllocs()
	cpu0 := admCPUTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("have %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	// On a shared machine the rate swings with the neighbours' load; the
	// process's CPU time per request (clients and server together) does not.
	b.ReportMetric(float64(admCPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// admCPUTime is the CPU time the process has used, in nanoseconds.
func admCPUTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
