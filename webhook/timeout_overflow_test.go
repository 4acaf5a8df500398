package webhook_test

import (
	"strings"
	"testing"

	"github.com/actorkube/controllermanager/webhook"
)

// A bare ?timeout= of more seconds than an int holds is a timeout longer
// than 30s, and is capped at 30s as any longer one is (docs/webhooks.md),
// not refused as "not a duration"; one as far below zero is too short.
func TestWebhookTimeoutOverflowIsTheLongest(t *testing.T) {
	v1 := admBody(t, admV1)
	f := admServe(t, webhook.Config{}, nil, newAdmHook("validate", "/validate"))
	// %2B is a "+": an explicitly positive number.
	for _, q := range []string{"9223372036854775808", "99999999999999999999", "%2B18446744073709551616"} {
		if r := f.post(t, "/validate?timeout="+q, v1); r.code != 200 {
			t.Errorf("?timeout=%s: have %d %q, want 200 (capped at 30s)", q, r.code, r.text)
		}
	}
	for _, q := range []string{"-9223372036854775809", "-99999999999999999999"} {
		if r := f.post(t, "/validate?timeout="+q, v1); r.code != 400 || !strings.Contains(r.text, "less than 1s") {
			t.Errorf("?timeout=%s: have %d %q, want 400 saying less than 1s", q, r.code, r.text)
		}
	}
}
