// Package respond writes the plain-text and JSON answers of the HTTP
// surfaces (the probes, the live view): never cached, never sniffed.
package respond

import (
	"encoding/json"
	"net/http"
)

// Text answers code with a plain-text body.
func Text(w http.ResponseWriter, code int, body string) {
	headers(w, "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// JSON answers code with v as JSON; a v that does not marshal is a 500
// with the error.
func JSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Text(w, http.StatusInternalServerError, err.Error())
		return
	}
	headers(w, "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

func headers(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}
