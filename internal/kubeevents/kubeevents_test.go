package kubeevents

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/actorkube/controllermanager/supervisor"
)

func TestCap1k(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int // the length of the result, in bytes
	}{
		{"short", "child failed", len("child failed")},
		{"exactly the cap", strings.Repeat("a", maxEventMessage), maxEventMessage},
		{"one byte over", strings.Repeat("a", maxEventMessage+1), maxEventMessage},
		// 2-byte runes: the cut falls inside one and moves back to its start.
		{"cut inside a rune", strings.Repeat("é", 600), maxEventMessage - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have := cap1k(tt.in)
			if len(have) != tt.want {
				t.Errorf("want %d bytes, have %d", tt.want, len(have))
			}
			if !utf8.ValidString(have) {
				t.Errorf("cut inside a rune: %q", have[len(have)-8:])
			}
			if cut := len(tt.in) > maxEventMessage; cut != strings.HasSuffix(have, "…") {
				t.Errorf("cut: %v; ellipsis: %v", cut, !cut)
			}
		})
	}
}

// The spam filter's key has the reason, so that a crash loop's ChildFailed
// Warnings do not use up the bucket of the LeaderLost that follows.
func TestSpamKeyHasTheReason(t *testing.T) {
	e := func(reason string) *corev1.Event {
		return &corev1.Event{
			Type: corev1.EventTypeWarning, Reason: reason,
			Source:         corev1.EventSource{Component: "lease", Host: "a"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-0"},
		}
	}
	if spamKey(e(ReasonChildFailed)) == spamKey(e(ReasonLeaderLost)) {
		t.Error("two reasons share a key")
	}
	if spamKey(e(ReasonChildFailed)) != spamKey(e(ReasonChildFailed)) {
		t.Error("one reason has two keys")
	}
}

func TestRecordThroughTheHostsRecorder(t *testing.T) {
	t.Setenv("POD_NAME", "")
	host := record.NewFakeRecorder(16)
	r := New(Config{Logger: slog.New(slog.DiscardHandler), Host: host, Namespace: "ns", Name: "lease", Identity: "a"})
	if r == nil {
		t.Fatal("a host recorder and a Lease record nothing")
	}
	r.Start() // the host's recorder: nothing to make
	lost := fmt.Errorf("renewal failed: %w", errors.New("timeout"))
	for _, e := range []supervisor.Event{
		{Type: supervisor.PhaseChanged, Phase: supervisor.PhaseRunning}, // not an Event
		{Type: supervisor.LeaderElected},
		{Type: supervisor.ChildStarted, Child: "jobs"}, // not an Event
		{Type: supervisor.ChildFailed, Child: "jobs", Err: errors.New(`child "jobs": boom`)},
		{Type: supervisor.ShardAcquired, Shard: 2},
		{Type: supervisor.LeaderLost, Err: lost},
	} {
		r.Record(e)
	}
	r.Stop()
	want := []string{
		"Normal LeaderElected a became leader of Lease ns/lease",
		`Warning ChildFailed child "jobs": boom`,
		"Normal ShardAcquired a acquired shard 2, Lease ns/lease-2",
		"Warning LeaderLost a lost Lease ns/lease: renewal failed: timeout",
	}
	for _, w := range want {
		select {
		case have := <-host.Events:
			if have != w {
				t.Errorf("want %q, have %q", w, have)
			}
		default:
			t.Fatalf("want %q, have no more Events", w)
		}
	}
	select {
	case have := <-host.Events:
		t.Errorf("an Event too many: %q", have)
	default:
	}
}

func TestNoRecorder(t *testing.T) {
	t.Setenv("POD_NAME", "")
	logger := slog.New(slog.DiscardHandler)
	if r := New(Config{Logger: logger, Namespace: "ns", Name: "lease"}); r != nil {
		t.Error("no host and no clientset: want no Recorder")
	}
	if r := New(Config{Logger: logger, Client: fake.NewClientset()}); r != nil {
		t.Error("a clientset but no Lease: want no Recorder")
	}
	var r *Recorder // every method is a no-op on it
	r.Start()
	r.Record(supervisor.Event{Type: supervisor.LeaderElected})
	r.Stop()
	if r.Flushes() || r.LockRecorder() != nil {
		t.Error("a nil Recorder flushes or has a lock recorder")
	}
}
