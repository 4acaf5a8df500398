package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/actorkube/controllermanager/actors"
)

// Indexes of stats.admission.
const (
	answer200 = iota
	answer404
	answer429
	answer503
	answerOther
	answerTransport
)

// postReviews posts AdmissionReviews until ctx ends, one at a time, each to
// a webhook chosen at random (now and then to a removed one, or to a path
// no webhook serves).
func (h *Harness) postReviews(ctx context.Context) {
	if h.cfg.AdmissionRate > 0 {
		every(ctx, h.cfg.AdmissionRate, h.postReview)
		return
	}
	for ctx.Err() == nil {
		h.postReview()
	}
}

var podJSON = []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"chaos","namespace":"default"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`)

func (h *Harness) postReview() {
	var c *child
	switch r := h.float(); {
	case r < 0.97:
		c = h.randomLive(actors.KindWebhook)
	case r < 0.99:
		h.mu.Lock()
		for range 10 {
			if n := len(h.retired); n > 0 {
				if x := h.retired[h.intN(n)]; x.kind == actors.KindWebhook {
					c = x
					break
				}
			}
		}
		h.mu.Unlock()
	}
	path := "/chaos/nobody"
	if c != nil {
		path = c.path
	}
	uid := fmt.Sprintf("chaos-%d", h.webhookRequest.Add(1))
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(uid),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Name:      "chaos",
			Namespace: "default",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: podJSON},
		},
	})
	if err != nil {
		panic(err)
	}
	resp, err := h.client.Post(h.server.URL+path+"?timeout=2s", "application/json", bytes.NewReader(body))
	if err != nil {
		h.stats.admission[answerTransport].Add(1)
		h.violate("admission request to %s: %v", path, err)
		return
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	received := time.Now()
	if err != nil {
		h.stats.admission[answerTransport].Add(1)
		h.violate("admission request to %s: reading the answer: %v", path, err)
		return
	}
	switch resp.StatusCode {
	case http.StatusOK:
		h.stats.admission[answer200].Add(1)
		var review admissionv1.AdmissionReview
		switch err := json.Unmarshal(data, &review); {
		case err != nil:
			h.violate("admission request to %s: a 200 that is not a review: %v: %q", path, err, data)
		case review.Kind != "AdmissionReview" || review.APIVersion != "admission.k8s.io/v1" || review.Response == nil || string(review.Response.UID) != uid:
			h.violate("admission request %s to %s: a 200 with the wrong review: %q", uid, path, data)
		}
		if c == nil {
			h.violate("admission request to %s, which no webhook serves: 200", path)
			return
		}
		h.mu.Lock()
		c.tally.ok200++
		if review.Response != nil && review.Response.Result != nil && review.Response.Result.Code == http.StatusGatewayTimeout {
			c.tally.timedOut++ // a denial at the request's deadline: Handle may not have run
		}
		h.mu.Unlock()
	case http.StatusNotFound:
		h.stats.admission[answer404].Add(1)
		if c != nil {
			h.mu.Lock()
			sent := c.tally.removeSent
			h.mu.Unlock()
			if sent.IsZero() || sent.After(received) {
				h.violate("admission request to %s, served by %s, answered 404: %q", path, c.name, data)
			}
		}
	case http.StatusTooManyRequests:
		h.stats.admission[answer429].Add(1)
	case http.StatusServiceUnavailable:
		h.stats.admission[answer503].Add(1)
	default:
		h.stats.admission[answerOther].Add(1)
		h.violate("admission request to %s answered %d: %q", path, resp.StatusCode, data)
	}
}
