package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
	"github.com/actorkube/controllermanager/webhook"
)

// admBodyWatch wraps a handler and counts, across its requests, the bodies
// whose first Read has been called (by then the handler has made whatever
// buffer it makes before the body arrives) and the bytes read from them.
type admBodyWatch struct {
	reading atomic.Int64
	read    atomic.Int64
}

func (b *admBodyWatch) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &admWatchedBody{ReadCloser: r.Body, watch: b}
		next.ServeHTTP(w, r)
	})
}

type admWatchedBody struct {
	io.ReadCloser
	watch   *admBodyWatch
	started bool
}

func (b *admWatchedBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		b.watch.reading.Add(1)
	}
	n, err := b.ReadCloser.Read(p)
	b.watch.read.Add(int64(n))
	return n, err
}

// admHeap is the live heap after a collection; two, so that what sync.Pool
// keeps in its victim cache is gone too.
func admHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// admHeapWithin polls the heap until it has grown past base by at most
// bound, or the deadline passes; it returns the last growth seen.
func admHeapWithin(base, bound uint64) (grown uint64, ok bool) {
	ok = testchild.Eventually(admWait, func() bool {
		grown = max(admHeap(), base) - base
		return grown <= bound
	})
	return grown, ok
}

// TestWebhookServerMemoryFollowsTheBytesSentNotTheBytesClaimed floods the
// library's webhook server, with its defaults, with connections that send
// headers claiming a body of the largest size allowed and then nothing (then
// part of it): the heap grows with what was sent, not with what was claimed,
// and the connections past MaxBodyReads are answered 429 before their bodies
// are read.
func TestWebhookServerMemoryFollowsTheBytesSentNotTheBytesClaimed(t *testing.T) {
	const (
		claimed = webhook.DefaultMaxBodyBytes
		readers = webhook.DefaultMaxBodyReads
		refused = 8
		partial = 256 << 10 // the body each reader sends in the second round
	)
	hook := newAdmHook("flood", "/validate")
	mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", admQuiet)
	if err != nil {
		t.Fatal(err)
	}
	mgr.Add(hook)
	if err := mgr.Start(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), admWait)
		defer cancel()
		mgr.ShutdownAndWait(ctx)
	})
	watch := &admBodyWatch{}
	srv := newAdmHardened(t)
	addr := srv.serve(t, webhook.ServerConfig{Handler: watch.wrap(mgr.Handler())})

	// One review answered first, so that what the first request sets up
	// once (routes, TLS session state, pools) is not counted.
	warm := srv.dial(t, addr, nil)
	body := admBody(t, admV1)
	fmt.Fprintf(warm, "POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if resp, err := http.ReadResponse(bufio.NewReader(warm), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("warm-up review: %v %v", resp, err)
	}
	warm.Close()

	head := fmt.Sprintf("POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", claimed)
	var sent int64
	conns := make([]*tls.Conn, readers)
	for i := range conns { // dialled before the baseline: each TLS connection's own cost is not the handler's
		conns[i] = srv.dial(t, addr, nil)
		if err := conns[i].Handshake(); err != nil {
			t.Fatal(err)
		}
	}
	reading0 := watch.reading.Load()
	base := admHeap()
	for _, c := range conns {
		n, err := io.WriteString(c, head)
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
	}
	if !testchild.Eventually(admWait, func() bool { return watch.reading.Load()-reading0 == readers }) {
		t.Fatalf("%d of %d requests reached their body within %s", watch.reading.Load()-reading0, readers, admWait)
	}

	// Past MaxBodyReads: 429 at once, with the reason, before any body.
	for i := range refused {
		c := srv.dial(t, addr, nil)
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("refused connection %d: %v", i, err)
		}
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
			!strings.Contains(string(text), "too many request bodies being read at once") {
			t.Errorf("connection %d past MaxBodyReads: want 429, Retry-After: 1 and the reason; have %d %q %q",
				i, resp.StatusCode, resp.Header.Get("Retry-After"), text)
		}
		c.Close()
	}
	if got := watch.reading.Load() - reading0; got != readers {
		t.Errorf("the refused requests' bodies were read: %d bodies read, want %d", got, readers)
	}

	// Headers only: each connection may cost the handler its first read's
	// room and its request's bookkeeping, nothing near what it claims.
	const perConnHeaders = 32 << 10
	grown, ok := admHeapWithin(base, readers*perConnHeaders)
	t.Logf("headers only: %d connections sent %d bytes claiming %d MiB in all; heap grew %d KiB (%d B per connection)",
		readers, sent, readers*claimed>>20, grown>>10, grown/readers)
	if !ok {
		t.Errorf("headers only: the heap grew %d KiB, want at most %d KiB (%d connections × %d KiB); they claimed %d MiB",
			grown>>10, readers*perConnHeaders>>10, readers, perConnHeaders>>10, readers*claimed>>20)
	}

	// Then part of each body: the buffers grow with what arrives, at most
	// twice it.
	read0 := watch.read.Load()
	chunk := strings.Repeat(" ", partial)
	for _, c := range conns {
		n, err := io.WriteString(c, chunk)
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
	}
	if !testchild.Eventually(admWait, func() bool { return watch.read.Load()-read0 == readers*partial }) {
		t.Fatalf("the handler read %d of the %d bytes sent within %s", watch.read.Load()-read0, readers*partial, admWait)
	}
	bound := uint64(3*sent) + readers*perConnHeaders
	grown, ok = admHeapWithin(base, bound)
	t.Logf("with %d KiB of body each: %d bytes sent in all; heap grew %d KiB (%.2f × the bytes sent)",
		partial>>10, sent, grown>>10, float64(grown)/float64(sent))
	if !ok {
		t.Errorf("with %d KiB of body each: the heap grew %d KiB, want at most %d KiB (3 × the %d KiB sent, and the headers' allowance)",
			partial>>10, grown>>10, bound>>10, sent>>10)
	}
	for _, c := range conns {
		c.Close()
	}
}

// TestWebhookMaxBodyReadsIsConfigurable: a bound of 2 refuses the third
// body being read at once; a negative bound refuses none.
func TestWebhookMaxBodyReadsIsConfigurable(t *testing.T) {
	for _, tt := range []struct {
		maxReads, readers int
		wantRefused       bool
	}{
		{maxReads: 2, readers: 2, wantRefused: true},
		{maxReads: -1, readers: 8, wantRefused: false},
	} {
		t.Run(fmt.Sprint(tt.maxReads), func(t *testing.T) {
			hook := newAdmHook("bounded", "/validate")
			mgr, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{}, "", admQuiet)
			if err != nil {
				t.Fatal(err)
			}
			mgr.Add(hook)
			if err := mgr.Start(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), admWait)
				defer cancel()
				mgr.ShutdownAndWait(ctx)
			})
			watch := &admBodyWatch{}
			srv := newAdmHardened(t)
			addr := srv.serve(t, webhook.ServerConfig{Handler: watch.wrap(mgr.WebhookHandler(webhook.Config{MaxBodyReads: tt.maxReads}))})
			head := "POST /validate?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
			for range tt.readers {
				if _, err := io.WriteString(srv.dial(t, addr, nil), head); err != nil {
					t.Fatal(err)
				}
			}
			if !testchild.Eventually(admWait, func() bool { return watch.reading.Load() == int64(tt.readers) }) {
				t.Fatalf("%d of %d requests reached their body", watch.reading.Load(), tt.readers)
			}
			c := srv.dial(t, addr, nil)
			if _, err := io.WriteString(c, head+strings.Repeat(" ", 1000)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			refused := resp.StatusCode == http.StatusTooManyRequests &&
				strings.Contains(string(text), fmt.Sprintf("too many request bodies being read at once (MaxBodyReads %d)", tt.maxReads))
			if refused != tt.wantRefused {
				t.Errorf("with %d bodies being read: want refused %v, have %d %q", tt.readers, tt.wantRefused, resp.StatusCode, text)
			}
			if !tt.wantRefused && resp.StatusCode != http.StatusBadRequest { // blank body: read, then not a review
				t.Errorf("unbounded: want the body read and refused as no review (400), have %d %q", resp.StatusCode, text)
			}
		})
	}
}
